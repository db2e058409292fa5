"""What an earlier attempt left running when the next one starts, and how long it stays.

A launcher restarts its workers once it has stopped the ones it started; their own children are not its
concern. A torch DataLoader's workers, forked by a rank, inherit every descriptor it had open: rank 0's
listening store socket too. When the rank is SIGKILLed (by NVRx's rank monitor, by the kernel, by a fault),
its workers live on until their watchdog notices the parent is gone (up to 5 s: torch's
MP_STATUS_CHECK_INTERVAL) and keep the port in LISTEN; the next attempt's rank 0 then dies of EADDRINUSE
on it. So at each attempt's start (its launcher's rendezvous line: the last round's workers are stopped)
the runner lists the run's processes of earlier rounds still alive and what each holds, a listening port
(in the network namespace it runs in: ``/proc/<pid>/net/tcp`` is its own namespace's table), a file open in
the run's checkpoint folder, GPU memory where nvidia-smi shows it, as a ``leftovers_at_start`` event; then
it watches them and writes ``leftover_gone`` as each goes. The judge reads both (chaos/judge/accounting.py).

    watch = LeftoverWatch(run_id, run_dir / "checkpoints", log.write)
    watch.attempt_starts(1)     # at each round's start; [] when nothing is left
    ...
    watch.stop()
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from chaos.supervise.procs import alive, marked_processes, round_of, start_time
from runlog.leftover_records import HeldBy, LeftoverGone, LeftoversAtStart
from runlog.records import Record

LISTEN = "0A"
"""The TCP state LISTEN in /proc/net/tcp's ``st`` column."""
WATCH_S = 60.0
"""How long the runner follows leftovers after an attempt's start (a process still there after it is
killed with the run's others at the launch's end, and reported as a ``leftover``)."""


def listening_ports(pid: int) -> tuple[int, ...]:
    """TCP ports the process holds open in LISTEN, in its own network namespace; () once it is gone."""
    held = set(_socket_inodes(pid))
    if not held:
        return ()
    ports = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if len(fields) > 9 and fields[3] == LISTEN and fields[9] in held:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return tuple(sorted(ports))


def _socket_inodes(pid: int) -> list[str]:
    inodes = []
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.append(target[len("socket:[") : -1])
    return inodes


def open_files(pid: int, folder: Path) -> tuple[str, ...]:
    """Files under `folder` the process holds open."""
    root, found = str(folder.resolve()) + os.sep, set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                if (target := os.readlink(fd)).startswith(root):
                    found.add(target)
    return tuple(sorted(found))


def gpu_memory() -> dict[int, int]:
    """GPU memory (MiB) by pid, as nvidia-smi lists its compute apps; {} without nvidia-smi or GPUs."""
    if shutil.which("nvidia-smi") is None:
        return {}
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    used: dict[int, int] = {}
    for line in out.splitlines():
        pid, _, mib = line.partition(",")
        if pid.strip().isdigit() and mib.strip().isdigit():
            used[int(pid)] = used.get(int(pid), 0) + int(mib)
    return used


def command_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def scan(run_id: str, attempt: int, folder: Path) -> list[HeldBy]:
    """The run's processes of rounds before `attempt` still alive (workers and what they started: each
    carries its round), with what each holds."""
    earlier = {
        pid: env for pid, env in marked_processes(run_id).items()
        if env.get("RANK", "").isdigit() and (r := round_of(env)) is not None and r < attempt
    }
    gpu = gpu_memory() if earlier else {}
    return [
        HeldBy(pid, command_name(pid), round_of(env), int(env["RANK"]), listening_ports(pid), open_files(pid, folder), gpu.get(pid))
        for pid, env in earlier.items()
    ]


class LeftoverWatch:
    """The run's leftovers, found at each attempt's start (``leftovers_at_start``) and followed until each is
    gone (one ``leftover_gone`` per process, however many attempts' starts found it)."""

    def __init__(self, run_id: str, folder: Path, write: Callable[[Record], object]):
        self.run_id, self.folder, self.write = run_id, folder, write
        self._left: dict[tuple[int, int | None], tuple[HeldBy, float]] = {}
        """By (pid, start time): a pid the kernel hands to a new process is not the leftover; with when it was first seen."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._until = 0.0

    def attempt_starts(self, attempt: int) -> list[HeldBy]:
        """Scan for what rounds before `attempt` left running, write ``leftovers_at_start`` (nothing when none
        is left), and follow each process found until it is gone (for ``WATCH_S`` at most)."""
        now = time.monotonic()
        found = scan(self.run_id, attempt, self.folder)
        if not found:
            return found
        self.write(LeftoversAtStart(tuple(found), attempt=attempt))
        with self._lock:
            for held in found:
                self._left.setdefault((held.pid, start_time(held.pid)), (held, now))
            self._until = now + WATCH_S
        if self._thread is None:
            self._thread = threading.Thread(target=self._follow, daemon=True)
            self._thread.start()
        return found

    def _follow(self) -> None:
        while not self._stop.is_set() and time.monotonic() < self._until:
            self.check()
            self._stop.wait(0.1)
        self.check()

    def check(self) -> None:
        """Write ``leftover_gone`` for each followed process that is no longer alive."""
        with self._lock:
            gone = [(key, *v) for key, v in self._left.items() if not alive(key[0]) or start_time(key[0]) != key[1]]
            for key, *_ in gone:
                del self._left[key]
        for _, held, seen in gone:
            self.write(LeftoverGone(held.pid, held.name, held.attempt, round(time.monotonic() - seen, 3)))

    def stop(self) -> None:
        """Stop following (the launch is over: what was left is killed with the run's other processes)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
