"""Free loopback ports that parallel runs (pytest-xdist workers, several CLIs) never share.

A block of consecutive ports is claimed with an O_EXCL lock file per port in a machine-wide folder, after
checking that each port can be bound; the claim lasts until released (stale claims of dead processes are
reclaimed). A block, because in-process restart uses MASTER_PORT+1 and +2 besides the rendezvous port.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import tempfile
from pathlib import Path

LOCK_DIR = Path(tempfile.gettempdir()) / "chaos-ports"
RANGE = (20000, 32000)  # below Linux's ephemeral range (32768+), so outgoing connections don't take them


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _claim(port: int) -> bool:
    path = LOCK_DIR / str(port)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        if _owner_alive(path):
            return False
        path.unlink(missing_ok=True)
        return _claim(port)
    with os.fdopen(fd, "w") as f:
        f.write(str(os.getpid()))
    return True


def _owner_alive(path: Path) -> bool:
    try:
        pid = int(path.read_text() or "0")
        os.kill(pid, 0)
    except (ValueError, OSError):
        return False
    return True


def reserve_ports(count: int = 3, attempts: int = 200) -> list[int]:
    """Claim `count` consecutive bindable ports; release them with `release_ports`."""
    LOCK_DIR.mkdir(exist_ok=True)
    rng = random.Random()
    for _ in range(attempts):
        base = rng.randrange(RANGE[0], RANGE[1] - count)
        claimed = []
        for port in range(base, base + count):
            if not (_bindable(port) and _claim(port)):
                break
            claimed.append(port)
        if len(claimed) == count:
            return claimed
        release_ports(claimed)
    raise RuntimeError(f"no block of {count} free loopback ports in {RANGE} after {attempts} tries")


def release_ports(ports: list[int]) -> None:
    for port in ports:
        with contextlib.suppress(OSError):
            (LOCK_DIR / str(port)).unlink()
