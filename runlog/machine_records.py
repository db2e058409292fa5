"""The records of what a run's faults do on the machine beyond its processes (chaos/supervise/cgroup.py
writes them; docs/events.md): the kernel's OOM kills in the run's memory cgroup."""

from __future__ import annotations

from dataclasses import dataclass

from runlog import names
from runlog.records import Record


@dataclass(frozen=True)
class OomKill(Record):
    """The kernel's OOM killer ended `target` (a process of rank `target_rank`) in the run's memory cgroup:
    read from the cgroup's own OOM-kill counter (`oom_kills`, the count so far), not inferred from a SIGKILL."""

    event = names.OOM_KILL
    target: int | None
    target_rank: int | None
    cgroup: str
    oom_kills: int
