"""A passthrough FUSE file system: the storage a `storage_stall` fault stops, and the launcher agent it serves.

    python -m chaos.supervise.stallfs RUN_DIR BACKING MOUNTPOINT -- COMMAND [ARG ...]

is a launcher agent's wrapper (inside the run's private mount namespace, chaos/supervise/isolation.py): it
starts the file system serving the folder BACKING at MOUNTPOINT (``serve``: fusepy over libfuse 2), and the
keeper that resumes it, then execs COMMAND with ``CHAOS_STALLFS`` (runlog/env.py: the server's pid and the
keeper's FIFO) in its environment, which the ranks inherit.

Every system call on MOUNTPOINT is a request the server answers; a rank's `storage_stall` fault stops it
(SIGSTOP), and those calls block in the kernel, as on a parallel file system that stopped answering, and
asks the keeper to resume it (SIGCONT) after the fault's seconds. The keeper is another process, so it runs
while the server is stopped and while the rank that stopped it is killed for hanging; it writes both
signals as ``signal_sent`` events (events/storage.jsonl). Both die of their parent-death signal with the
launcher (SIGKILL ends a stopped process too), carry the run's marker for the watchdog, and the mount is
never seen outside the run: it vanishes with the namespace's last process. A rank blocked on it still dies
of SIGKILL (FUSE's waits are killable).
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from runlog.env import STALLFS_VAR
from runlog.log import EventLog
from runlog.records import SignalSent

READY = "ready"
PR_SET_PDEATHSIG = 1


class _Calls:
    """Each call done on the same path under the backing folder; file handles are its file descriptors. An
    OSError a call raises is its answer (fusepy returns its errno to the kernel)."""

    def __init__(self, backing: Path):
        self.backing = str(backing)

    def _at(self, path: str) -> str:
        return self.backing + path

    def init(self, path: str) -> None:
        print(READY, flush=True)

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = os.lstat(self._at(path))
        keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime", "st_mtime", "st_ctime")
        return {key: getattr(st, key) for key in keys}

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._at(path))]

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._at(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_frsize", "f_namemax")
        return {key: getattr(st, key) for key in keys}

    def access(self, path: str, amode: int) -> None:
        if not os.access(self._at(path), amode):
            raise OSError(errno.EACCES, "access")

    def mkdir(self, path: str, mode: int) -> None:
        os.mkdir(self._at(path), mode)

    def rmdir(self, path: str) -> None:
        os.rmdir(self._at(path))

    def unlink(self, path: str) -> None:
        os.unlink(self._at(path))

    def rename(self, old: str, new: str) -> None:
        os.rename(self._at(old), self._at(new))

    def chmod(self, path: str, mode: int) -> None:
        os.chmod(self._at(path), mode)

    def chown(self, path: str, uid: int, gid: int) -> None:
        os.chown(self._at(path), uid, gid)

    def utimens(self, path: str, times: tuple[float, float] | None = None) -> None:
        os.utime(self._at(path), times)

    def truncate(self, path: str, length: int, fh: int | None = None) -> None:
        os.truncate(self._at(path) if fh is None else fh, length)

    def open(self, path: str, flags: int) -> int:
        return os.open(self._at(path), flags)

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        return os.open(self._at(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        return os.pwrite(fh, data, offset)

    def fsync(self, path: str, datasync: int, fh: int) -> None:
        os.fsync(fh)

    def fsyncdir(self, path: str, datasync: int, fh: int) -> None:
        """Directory syncs (the trainer's rename of a sealed checkpoint) reach the backing folder's own."""

    def release(self, path: str, fh: int) -> None:
        os.close(fh)


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def serve(backing: str, mountpoint: str) -> None:
    """The server (fusepy is imported here alone: the wrapper and the keeper need none of it)."""
    from fuse import FUSE, Operations

    passthrough = type("Passthrough", (_Calls, Operations), {})
    # big_writes: libfuse 2 otherwise splits every write into 4 KiB requests (96 MB/s here; 700 MB/s with it)
    FUSE(passthrough(Path(backing)), mountpoint, foreground=True, fsname="chaos-stallfs", big_writes=True, max_write=1 << 20)


def keep(run_dir: str, server: int, control: str) -> None:
    """The keeper: each line ``SECONDS ATTEMPT`` on the FIFO is a stall a rank began by stopping the server;
    resume it that long after. Opened read-write, the FIFO never reads end-of-file between writers."""
    fd = os.open(control, os.O_RDWR)
    with os.fdopen(fd, "r", buffering=1) as fifo:
        for line in fifo:
            seconds, attempt = line.split()
            log = EventLog(run_dir, "storage", rank=-1, attempt=int(attempt))
            log.write(SignalSent("SIGSTOP", server, pid=server, storage=True))
            time.sleep(float(seconds))
            log.write(SignalSent("SIGCONT", server, pid=server, storage=True))  # first: the launcher may end the moment it is sent
            log.close()
            os.kill(server, signal.SIGCONT)


def wrap(run_dir: str, backing: str, mountpoint: str, command: list[str]) -> None:
    """Start the server and its keeper, then become COMMAND (the launcher agent)."""
    here = [sys.executable, "-m", "chaos.supervise.stallfs"]
    server = subprocess.Popen([*here, "serve", backing, mountpoint], stdout=subprocess.PIPE, preexec_fn=_die_with_parent)
    assert server.stdout is not None
    if server.stdout.readline().strip() != READY.encode():
        sys.exit(f"stallfs: the FUSE server did not mount {mountpoint} (exit {server.wait()})")
    control = str(Path(os.environ.get("TMPDIR", "/tmp")) / f"stallfs-{os.getpid()}.fifo")
    os.mkfifo(control)
    subprocess.Popen([*here, "keep", run_dir, str(server.pid), control], preexec_fn=_die_with_parent)
    os.environ[STALLFS_VAR] = f"{server.pid}:{control}"
    os.execvp(command[0], command)


def main(argv: list[str]) -> None:
    if argv[0] == "serve":
        serve(*argv[1:])
    elif argv[0] == "keep":
        keep(argv[1], int(argv[2]), argv[3])
    else:
        at = argv.index("--")
        wrap(*argv[:at], argv[at + 1 :])


if __name__ == "__main__":
    main(sys.argv[1:])
