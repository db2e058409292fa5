"""A memory limit of the run's own: the cgroup a `host_oom` fault's rank joins, so that the kernel's OOM killer
ends that rank and nothing else on the machine.

The runner makes one memory cgroup per run, a child of its own (cgroup v1's memory controller, or cgroup v2
where the unified hierarchy has it), limited to the fault's `limit_bytes`; the rank moves itself into it at
its step (its memory from then on is charged there) and grows until the kernel kills it. The kill is read
from the cgroup itself (v1: ``oom_kill`` in memory.oom_control; v2: memory.events), so the verdict can tell
it from any other SIGKILL. The cgroup's name carries its owner (the runner's pid and start time): the
runner removes it when the run ends, and a run whose runner was SIGKILLed leaves an empty one (the watchdog
killed its processes) that the next run's sweep removes.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from chaos.supervise.procs import start_time
from runlog import names
from runlog.log import EventLog
from runlog.machine_records import OomKill
from runlog.reader import EventTail

V1_MEMORY = Path("/sys/fs/cgroup/memory")
V2_ROOT = Path("/sys/fs/cgroup")
PREFIX = "chaos-"
_NAME = re.compile(rf"^{PREFIX}(\d+)-(\d+)-")


@dataclass(frozen=True)
class Hierarchy:
    """Where memory cgroups are made here, and the names of its files (they differ between v1 and v2)."""

    parent: Path
    """This process's own memory cgroup: the run's is its child."""
    version: int

    @property
    def limit_file(self) -> str:
        return "memory.limit_in_bytes" if self.version == 1 else "memory.max"

    @property
    def oom_file(self) -> str:
        return "memory.oom_control" if self.version == 1 else "memory.events"


def _own_path(controller: str) -> str | None:
    """This process's cgroup path in the hierarchy of `controller` ('' for the unified one)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return None


def hierarchy() -> Hierarchy | str:
    """Where this machine lets the run make a memory cgroup, or why it does not (a line naming what lacks)."""
    if (V1_MEMORY / "memory.limit_in_bytes").is_file():
        own = _own_path("memory")
        parent = V1_MEMORY / (own or "/").lstrip("/")
        version = 1
    elif "memory" in _read(V2_ROOT / "cgroup.controllers").split():
        own = _own_path("")
        parent = V2_ROOT / (own or "/").lstrip("/")
        version = 2
        if "memory" not in _read(parent / "cgroup.subtree_control").split():
            return f"cgroup v2: the memory controller is not enabled for children of {parent}"
    else:
        return "no cgroup memory controller (neither /sys/fs/cgroup/memory nor cgroup v2 with memory)"
    if not os.access(parent, os.W_OK):
        return f"{parent}: cannot make a memory cgroup there (needs root or a delegated cgroup)"
    return Hierarchy(parent, version)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@dataclass(frozen=True)
class MemoryCgroup:
    """The run's memory cgroup."""

    path: Path
    oom_file: str

    @classmethod
    def create(cls, where: Hierarchy, run_id: str, limit_bytes: int) -> MemoryCgroup:
        me = os.getpid()
        path = where.parent / f"{PREFIX}{me}-{start_time(me)}-{run_id}"
        path.mkdir()
        if where.version == 1:
            (path / "memory.swappiness").write_text("0")  # the limit is met in memory, not in swap
        (path / where.limit_file).write_text(str(limit_bytes))
        return cls(path, where.oom_file)

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer ended in this cgroup (0 once it is gone)."""
        for line in _read(self.path / self.oom_file).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def pids(self) -> list[int]:
        return [int(p) for p in _read(self.path / "cgroup.procs").split()]

    def remove(self) -> None:
        """Kill what is still inside (nothing, after a run that reaped its processes) and remove it."""
        _remove(self.path)


def _remove(path: Path, timeout_s: float = 3.0) -> None:
    end = time.monotonic() + timeout_s
    while path.exists():
        for pid in MemoryCgroup(path, "").pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(FileNotFoundError, OSError):
            path.rmdir()  # EBUSY while a killed process is still leaving
        if time.monotonic() > end:
            return
        time.sleep(0.02)


def join(path: str | Path) -> None:
    """Move this process into the cgroup at `path` (what a host_oom rank does at its step)."""
    (Path(path) / "cgroup.procs").write_text(str(os.getpid()))


def of_run(run_id: str) -> list[Path]:
    """The memory cgroups of run `run_id` still on the machine (a leftover once the run has ended)."""
    where = hierarchy()
    if isinstance(where, str):
        return []
    return sorted(p for p in where.parent.glob(f"{PREFIX}*-{run_id}") if p.is_dir())


def sweep() -> list[Path]:
    """Remove the run cgroups whose runner is gone; returns them."""
    where = hierarchy()
    if isinstance(where, str):
        return []
    swept = []
    for path in where.parent.glob(f"{PREFIX}*"):
        named = _NAME.match(path.name)
        if named and start_time(int(named[1])) != int(named[2]):
            _remove(path)
            swept.append(path)
    return swept


class OomWatch:
    """The run's memory cgroup while the run goes: each OOM kill the kernel counts in it becomes an
    ``oom_kill`` event naming the pid and rank, those of the host_oom rank that joined it (its
    ``fault_injected`` event carries both)."""

    def __init__(self, cgroup: MemoryCgroup, run_dir: Path, events: EventLog):
        self.cgroup, self.events = cgroup, events
        self.tail = EventTail(run_dir, "rank-*.jsonl")
        self.joined: list[tuple[int, int]] = []
        """(pid, rank) of each rank that joined the cgroup, in order."""
        self.counted = 0

    def tick(self) -> None:
        for e in self.tail.poll():
            if e["event"] == names.FAULT_INJECTED and e.get("fault") == "host_oom":
                self.joined.append((int(e["pid"]), int(e["rank"])))
        kills = self.cgroup.oom_kills()
        while self.counted < kills:
            pid, rank = self.joined[self.counted] if self.counted < len(self.joined) else (None, None)
            self.counted += 1
            self.events.write(OomKill(pid, rank, str(self.cgroup.path), self.counted))


def remove_run(run_id: str) -> None:
    """Remove the run's memory cgroups (the watchdog's, once the runner is gone)."""
    for path in of_run(run_id):
        _remove(path)
