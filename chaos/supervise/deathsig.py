"""Exec a command that the kernel kills when its parent dies: how a launcher agent dies with its runner.

    python -I -S chaos/supervise/deathsig.py PARENT_PID COMMAND [ARG ...]

sets the parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), checks that the parent is still
PARENT_PID (it may have died before the signal was set), and execs COMMAND in the same process: the pid,
session and environment the runner gave it stay. What it covers, and what it does not: the signal fires
when the *thread* that forked the process ends (the runner starts agents from the thread that waits for
them), and only for this process, not for what the launcher starts itself (its workers and rank monitors
are the watchdog's, chaos/supervise/watchdog.py). Run by its path with the standard library alone, so it
starts in milliseconds and needs no PYTHONPATH.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1


def wrap(command: list[str]) -> list[str]:
    """`command` as this process's child that dies with it."""
    return [sys.executable, "-I", "-S", str(Path(__file__).resolve()), str(os.getpid()), *command]


def main(argv: list[str]) -> None:
    parent, command = int(argv[0]), argv[1:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        sys.exit(f"deathsig: the parent {parent} died before the launch")
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
