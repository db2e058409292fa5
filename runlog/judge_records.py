"""The records the judge writes into a run's log: its accounting of the run's failures
(events/accounting.jsonl, chaos/judge/accounting.py) and the culprits the stack named (events/culprit.jsonl,
chaos/judge/culprit.py). Apart from runlog/records.py, whose records the run's own processes
write as it goes."""

from __future__ import annotations

from dataclasses import dataclass

from runlog import names
from runlog.records import Record, optional


@dataclass(frozen=True)
class UnexplainedFailure(Record):
    """An attempt that did not complete and that no injected fault explains (chaos/judge/accounting.py):
    written by the judge, stamped when it happened, with the cause quoted from the rank's or the launcher's log."""

    event = names.UNEXPLAINED_FAILURE
    failed_rank: int | None
    exit_code: int | None
    signal: str | None
    how: str
    """What showed it: worker_failed, exit, inprocess_abort, launcher_exit, deadline."""
    cause: str
    attempt: int | None = optional()
    """The attempt that failed (the runner's own attempt may have moved on)."""


@dataclass(frozen=True)
class FaultNeverDue(Record):
    """A planned fault that never fired: its attempt, or the run, ended before its trigger."""

    event = names.FAULT_NEVER_DUE
    fault: str
    fault_id: str
    reason: str
    attempt: int | None = optional()
    """The attempt the fault was planned for."""


@dataclass(frozen=True)
class CulpritClaim(Record):
    """A part of the resiliency stack named a culprit: a rank, a node, or both, and a cause. Written by the
    judge from the source's own words (a rank monitor's line, a straggler report, the rerun state machine,
    torch's Flight Recorder analyser), stamped when the source said it."""

    event = names.CULPRIT_CLAIM
    source: str
    """Who said it: ``rank_monitor``, ``flight_recorder``, ``straggler``, ``rerun`` (chaos/judge/culprit.py, SOURCES)."""
    cause: str
    """What it says went wrong: ``hang``, ``straggler``, ``nan``, ``spike`` (chaos/judge/culprit.py, CAUSES)."""
    culprit_rank: int | None
    culprit_node: str | None
    detail: str
    """The source's own evidence: the line, the scores, the collective never joined."""
    persistence: str | None = optional()
    """The rerun state machine's verdict on the fault: ``transient`` or ``persistent``."""
    attempt: int | None = optional()
    """The attempt the claim is about."""
