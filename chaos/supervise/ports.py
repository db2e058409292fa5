"""Free loopback ports that parallel runs (pytest-xdist workers, several CLIs) never share.

A block of consecutive ports is claimed, after checking that each can be bound, by a lock file per port
in a machine-wide folder, held with an exclusive ``flock`` for the claim's lifetime. The kernel drops the
lock when its holder dies, however it dies, so a claim is live exactly while its file is locked: a dead
runner's file is free to claim again as it is, and nobody deletes a file someone else may be claiming (a
stale claim deleted and re-created by two claimers at once was the hole of pid files). A claimer that
locked a file checks that the path still names the file it locked, since the holder deletes the file
before it lets go. A block, because in-process restart uses MASTER_PORT+1 and +2 besides the rendezvous
port. ``sweep_claims`` removes the files no one holds (a dead runner's).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

LOCK_DIR = Path(tempfile.gettempdir()) / "chaos-port-claims"
RANGE = (20000, 32000)  # below Linux's ephemeral range (32768+), so outgoing connections don't take them


@dataclass
class Ports:
    """A claimed block: its ports, and the locked files that hold them until ``release``."""

    ports: list[int]
    fds: list[int] = field(default_factory=list, repr=False)

    def release(self) -> None:
        for port, fd in zip(self.ports, self.fds, strict=True):
            _let_go(LOCK_DIR / str(port), fd)
        self.fds = []


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _lock(path: Path) -> int | None:
    """An open descriptor holding the exclusive lock of the file at `path` (made if missing), None while
    another process holds it."""
    while True:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        os.close(fd)  # its holder deleted it between our open and our lock: the path is another file now


def _let_go(path: Path, fd: int) -> None:
    """Delete a claim's file, then drop its lock: a claimer waiting on the old file sees it is gone."""
    with contextlib.suppress(OSError):
        path.unlink()
    os.close(fd)


def _claim(port: int) -> int | None:
    fd = _lock(LOCK_DIR / str(port))
    if fd is not None:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())  # for whoever looks: the holder
    return fd


def reserve_ports(count: int = 3, attempts: int = 200) -> Ports:
    """Claim `count` consecutive bindable ports; ``release()`` them when the launch is over."""
    LOCK_DIR.mkdir(exist_ok=True)
    rng = random.Random()
    for _ in range(attempts):
        base = rng.randrange(RANGE[0], RANGE[1] - count)
        block = Ports([])
        for port in range(base, base + count):
            fd = _claim(port) if _bindable(port) else None
            if fd is None:
                break
            block.ports.append(port)
            block.fds.append(fd)
        if len(block.ports) == count:
            return block
        block.release()
    raise RuntimeError(f"no block of {count} free loopback ports in {RANGE} after {attempts} tries")


def sweep_claims() -> list[int]:
    """Remove the claim files no live process holds (a dead runner's); returns their ports."""
    swept = []
    for path in LOCK_DIR.glob("*") if LOCK_DIR.is_dir() else ():
        fd = _lock(path) if path.name.isdigit() else None
        if fd is not None:
            _let_go(path, fd)
            swept.append(int(path.name))
    return sorted(swept)
