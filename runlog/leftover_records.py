"""The records of what an earlier attempt left running when the next one started (chaos/supervise/leftovers.py
writes them; docs/events.md, "Leftovers of earlier attempts"): a process that outlives its attempt can hold
what the next attempt needs (a listening port, a checkpoint file, GPU memory)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from runlog import names
from runlog.records import Record, optional


@dataclass(frozen=True)
class HeldBy:
    """One process of an earlier attempt, alive when the next attempt started, and what it held then."""

    pid: int
    name: str
    """Its command name (/proc/<pid>/comm: ``pt_data_worker`` for a torch DataLoader worker)."""
    attempt: int | None
    """The attempt (launcher round) it belongs to."""
    rank: int | None
    """The rank it is, or whose child it is (the RANK it inherited)."""
    ports: tuple[int, ...] = ()
    """TCP ports it holds in LISTEN, in the network namespace it runs in (the run's own)."""
    files: tuple[str, ...] = ()
    """Files it holds open in the run's checkpoint folder."""
    gpu_mib: int | None = None
    """GPU memory it holds (nvidia-smi's compute apps), None where that is not visible."""


@dataclass(frozen=True)
class LeftoversAtStart(Record):
    """Processes of earlier attempts still alive as attempt `attempt` starts (its launcher's rendezvous line:
    the launcher has stopped the last round's workers), with what each holds."""

    event = names.LEFTOVERS_AT_START
    processes: tuple[HeldBy, ...]
    attempt: int | None = optional()

    def fields(self) -> dict[str, Any]:
        return {**super().fields(), "processes": [dataclasses.asdict(p) for p in self.processes]}


@dataclass(frozen=True)
class LeftoverGone(Record):
    """A process that `leftovers_at_start` listed has gone (it is no longer alive), `after_s` seconds after
    an attempt's start first found it; stamped when the runner saw it gone (it looks every 0.1 s)."""

    event = names.LEFTOVER_GONE
    target: int
    """The pid."""
    name: str
    of_attempt: int | None
    """The attempt it belonged to."""
    after_s: float
