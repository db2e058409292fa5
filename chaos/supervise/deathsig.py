"""Exec a command that the kernel kills when its parent dies: how a launcher agent dies with its runner.

    python -I -S chaos/supervise/deathsig.py PARENT_PID [--enter HOLDER_PID] COMMAND [ARG ...]

sets the parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), checks that the parent is still
PARENT_PID (it may have died before the signal was set), and execs COMMAND in the same process: the pid,
session and environment the runner gave it stay. What it covers, and what it does not: the signal fires
when the *thread* that forked the process ends (the runner starts agents from the thread that waits for
them), and only for this process, not for what the launcher starts itself (its workers and rank monitors
are the watchdog's, chaos/supervise/watchdog.py). Run by its path with the standard library alone, so it
starts in milliseconds and needs no PYTHONPATH.

``--enter HOLDER_PID`` first joins the network namespace of that process, and its mount namespace when it
has one of its own (``setns``: the run's isolation, chaos/supervise/isolation.py), then returns to the
working directory it had: a single-threaded process may change its mount namespace, and the exec'd
command and everything it starts inherit both.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1
CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000


def wrap(command: list[str], enter: int | None = None) -> list[str]:
    """`command` as this process's child that dies with it; inside the namespaces of `enter` if given."""
    joined = [] if enter is None else ["--enter", str(enter)]
    return [sys.executable, "-I", "-S", str(Path(__file__).resolve()), str(os.getpid()), *joined, *command]


def enter(libc: ctypes.CDLL, holder: int) -> None:
    """Join `holder`'s network namespace, and its mount namespace where it differs from ours."""
    cwd = os.getcwd()
    kinds = [("net", CLONE_NEWNET)]
    if os.stat(f"/proc/{holder}/ns/mnt").st_ino != os.stat("/proc/self/ns/mnt").st_ino:
        kinds.append(("mnt", CLONE_NEWNS))
    fds = [(os.open(f"/proc/{holder}/ns/{kind}", os.O_RDONLY), flag) for kind, flag in kinds]
    for fd, flag in fds:
        if libc.setns(fd, flag) != 0:
            raise OSError(ctypes.get_errno(), f"setns into the namespaces of {holder} failed")
        os.close(fd)
    os.chdir(cwd)  # joining a mount namespace moves the working directory to its root


def main(argv: list[str]) -> None:
    parent, command = int(argv[0]), argv[1:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        sys.exit(f"deathsig: the parent {parent} died before the launch")
    if command[:1] == ["--enter"]:
        enter(libc, int(command[1]))
        command = command[2:]
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
