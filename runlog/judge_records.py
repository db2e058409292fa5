"""The records the judge writes into a run's log (events/accounting.jsonl): its accounting of the run's
failures (chaos/judge/accounting.py). Apart from runlog/records.py, whose records the run's own processes
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
