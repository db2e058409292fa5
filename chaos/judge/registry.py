"""The one registry of verdicts: each expectation of `expect:`, the metric it is judged against, how, and
what it means; and the harness's own verdicts, which every run gets, with whether failing one means the
run *broke* (something other than the injected faults went wrong) rather than that the resiliency stack
failed to recover.

Before, an expectation met its metric by field name alone (``getattr``); a renamed metric would have
judged nothing. tests/unit/chaos/judge/test_registry.py checks that every field of ``Expect`` is here (or
one of the harness's, chaos.schema.expect.HARNESS_FIELDS) and that every metric named is a field of
``Metrics``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Judged = Literal["limit", "equal"]
"""limit: the observed number holds the expectation's {min, max}; equal: the observed value is the one expected."""


@dataclass(frozen=True)
class Expectation:
    """An `expect:` field: the ``Metrics`` field it reads, how it is judged, what it means."""

    metric: str
    judged: Judged
    text: str
    timeout: str | None = None
    """The ``Metrics`` field holding the FT heartbeat timeout the measured fault met (a limit's ``timeouts``)."""


@dataclass(frozen=True)
class HarnessCheck:
    """A verdict every run gets. ``broken``: failing it means the run broke (it cannot tell whether the
    stack recovered from its faults), not that the stack failed to."""

    text: str
    broken: bool


def _limit(metric: str, text: str) -> Expectation:
    return Expectation(metric, "limit", text)


def _equal(metric: str, text: str) -> Expectation:
    return Expectation(metric, "equal", text)


EXPECTATIONS: dict[str, Expectation] = {
    "exit_code": _equal("exit_code", "the launcher's exit code (the last launch's)"),
    "restarts": _limit("restarts", "restart rounds of the worker group: the last attempt's number"),
    "resumed_from_step": _equal("resumed_from_step", "the step the first attempt after the fault resumed from"),
    "completed_steps": _equal("completed_steps", "the highest step any attempt completed"),
    "lost_steps": _limit("lost_steps", "steps computed before the fault that had to be computed again"),
    "time_to_detect_s": Expectation(
        "time_to_detect_s", "limit", "the first fault fired -> the launcher or the trainer acted on it", timeout="heartbeat_timeout_s"
    ),
    "time_to_recover_s": _limit("time_to_recover_s", "the first fault fired -> the first step after the restart"),
    "time_to_detect_last_s": Expectation(
        "time_to_detect_last_s", "limit", "time_to_detect of the last fault", timeout="heartbeat_timeout_last_s"
    ),
    "heartbeat_timeout_last_s": _limit("heartbeat_timeout_last_s", "the FT heartbeat timeout in force where the last fault struck"),
    "goodput": _limit("goodput", "useful step time over the run's wall time"),
    "slowest_step_s": _limit("slowest_step_s", "rank 0's longest step of the final lineage"),
    "longest_step_gap_s": _limit("longest_step_gap_s", "rank 0's longest time between consecutive steps of an attempt, from the first fault on"),
    "steps_during_async_save": _limit("steps_during_async_save", "rank-0 steps completed while async saves were in flight"),
    "steps_during_stall": _limit("steps_during_stall", "rank-0 steps completed while the run's storage was stopped"),
    "faults_injected": _limit("faults_injected", "faults that fired, in the trainer or from the runner"),
    "checkpoints_rejected": _limit("checkpoints_rejected", "checkpoints the trainer found corrupt on load and skipped"),
    "stale_resumes": _limit("stale_resumes", "restarts that resumed from another checkpoint than the newest one retention keeps"),
    "checkpoints_saved": _equal("checkpoints_saved", "the iterations rank 0 saved a checkpoint of, in order (a failed save is not one)"),
    "preemption_saved": _equal("preemption_saved", "a checkpoint was sealed within the first SIGTERM's grace period"),
    "grace_killed": _equal("grace_killed", "the runner SIGKILLed processes that outlived a SIGTERM's grace"),
    "exit_reason": _equal("exit_reason", "rank 0's last exit reason"),
    "saved_at_exit": _equal("saved_at_exit", "rank 0's last exit came right after a checkpoint of that step"),
    "stragglers_flagged": _equal("stragglers_flagged", "every rank any straggler report flagged, sorted"),
    "reports_to_flag": _limit("reports_to_flag", "straggler reports from the fault to the first that flags its rank"),
    "inprocess_restarts": _limit("inprocess_restarts", "times NVRx's in-process Wrapper re-entered the training function"),
    "trainer_exit_codes": _equal("trainer_exit_codes", "per launch, the trainer's own exit code (rank 0's last exit)"),
    "learned_timeouts_used": _equal("learned_timeouts_used", "the last attempt started with FT timeouts learned earlier"),
    "rerun_diagnosis": _equal("rerun_diagnosis", "the rerun state machine's last diagnosis"),
    "world_size_after": _equal("world_size_after", "the world size of the last restart round"),
    "nodes_after": _equal("nodes_after", "the node identities of the last restart round's ranks, sorted"),
    "launches": _limit("launches", "times the job was launched (a relaunch, a Slurm requeue: one more each)"),
    "slurm_job_state": _equal("slurm_job_state", "the job's final state as Slurm records it"),
    "slurm_exit_code": _equal("slurm_exit_code", "the job's exit code as Slurm records it, code:signal"),
    "resume_source": _equal("resume_source", "what the first restart after the fault resumed from"),
    "timeout_won": _equal("timeout_won", "which timeout acted first on the fault"),
    "worker_signal": _equal("worker_signal", "the signal the first worker killed by one after the fault died of"),
    "stopped_for_no_progress": _equal(
        "no_progress_stop_cycles", "the cycles the job ran when ft_launcher's progress tracker stopped it (NVRx 0.7)"
    ),
    "restart_time_saved_s": _limit("restart_time_saved_s", "that stop against burning every restart: restarts left x mean cycle"),
    "health_check_failed": _equal("health_check_failed", "the first health check ft_launcher failed before a rendezvous, or none"),
}
"""Every `expect:` field judged against a metric, in the order verdicts are listed."""

BASELINE = "baseline"
"""The expectation judged against the fault-free run's files, not a metric (chaos/judge/verdicts.py)."""

HARNESS_CHECKS: dict[str, HarnessCheck] = {
    "deadline": HarnessCheck("the run ended before its deadline (or, with killed_at_deadline, outlived it)", broken=False),
    "processes_reaped": HarnessCheck("no process of the run was left after it", broken=True),
    "faults_found_targets": HarnessCheck("every planned fault came due and struck a real target", broken=True),
    "unexplained_failures": HarnessCheck(
        "every failed attempt is explained by an injected fault, or expected by name (failures_not_injected)", broken=True
    ),
    "pitfalls": HarnessCheck("the run fell into the resiliency card's pitfalls the scenario names, and no other", broken=False),
}
"""The verdicts every run gets whatever its expectations, in the order they are listed (the names the
schema knows as chaos.schema.expect.HARNESS_VERDICTS, for known_failure.verdicts)."""

def breaks_run(verdict_name: str) -> bool:
    """Whether failing this verdict means the run broke rather than that the stack failed to recover."""
    check = HARNESS_CHECKS.get(verdict_name)
    return check is not None and check.broken
