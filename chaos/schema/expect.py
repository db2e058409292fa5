"""What a recovered run must show: limits on measured numbers, the baseline comparison, the expectations."""

from __future__ import annotations

import signal
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from chaos.strict import Strict, show
from runlog import pitfalls


class Limit(Strict):
    """A bound on a measured number: {min: a, max: b}; either may be left out. A bare number means both."""

    min: float | None = None
    max: float | None = None
    startups: float | None = Field(default=None, gt=0)
    """With max: the bound also allows this many of the run's own start-up (its launch to its first step,
    ``Metrics.start_s``), for a time that includes starting workers again, which grows with the machine's load
    as the first start did (docs/performance.md, "Headroom under load")."""
    timeouts: float | None = Field(default=None, gt=0)
    """Both bounds also add this many of the FT heartbeat timeout in force where the fault struck (its rank's
    last ``ft_timeouts`` before it), for a detection the timeout bounds whatever it is: a learned one
    (``ft.calc_ft_timeouts``) varies with how fast the run stepped. Only the detection expectations take it
    (TIMEOUT_BOUNDED)."""

    @model_validator(mode="before")
    @classmethod
    def _from_number(cls, value: Any) -> Any:
        if isinstance(value, (dict, Limit)):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return {"min": value, "max": value}
        raise ValueError(f"expected a number or {{min: a, max: b}}, got {show(value)}")

    @model_validator(mode="after")
    def _can_hold(self) -> Limit:
        if self.min is None and self.max is None:
            raise ValueError("a limit needs min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min:g}) is greater than max ({self.max:g}): no value can hold")
        if self.startups is not None and self.max is None:
            raise ValueError("startups adds to max: give max as well")
        return self

    def for_run(self, start_s: float | None, timeout_s: float | None) -> Limit:
        """The limit in seconds for a run whose first start took `start_s` and whose fault met an FT heartbeat
        timeout of `timeout_s`. A part the run did not show (it never started, no timeout reported) stays
        unresolved and adds nothing: the strictest reading."""
        started = self.startups is not None and start_s is not None and self.max is not None
        timed = self.timeouts is not None and timeout_s is not None
        if not started and not timed:
            return self
        shift = self.timeouts * timeout_s if timed else 0.0
        more = self.startups * start_s if started else 0.0
        return Limit(
            min=None if self.min is None else self.min + shift,
            max=None if self.max is None else self.max + shift + more,
            startups=None if started else self.startups,
            timeouts=None if timed else self.timeouts,
        )

    def holds(self, value: float) -> bool:
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)

    def describe(self) -> str:
        timed = f" + {self.timeouts:g} x heartbeat timeout" if self.timeouts is not None else ""
        if self.min == self.max:
            return f"== {self.min:.4g}{timed}"
        most = f" + {self.startups:g} x start-up" if self.startups is not None else ""
        parts = [f">= {self.min:.4g}{timed}" if self.min is not None else "", f"<= {self.max:.4g}{timed}{most}" if self.max is not None else ""]
        return " and ".join(p for p in parts if p)


class Baseline(Strict):
    """Compare with a fault-free run of the same config: exact bits, or losses within a tolerance."""

    tolerance: float = Field(ge=0)


def _baseline_kind(value: Any) -> str:
    return "tolerance" if isinstance(value, (dict, Baseline)) else "exact"


# A discriminator, so that a wrong value is reported against the one form it resembles.
BaselineSpec = Annotated[
    Annotated[Literal["exact"], Tag("exact")] | Annotated[Baseline, Tag("tolerance")],
    Discriminator(_baseline_kind),
]


PitfallName = Literal[tuple(pitfalls.CARD)]  # type: ignore[valid-type]
SignalName = Literal[tuple(s.name for s in signal.Signals)]  # type: ignore[valid-type]
"""A pitfall of the resiliency card (runlog/pitfalls.py)."""

HARNESS_FIELDS = ("pitfalls", "killed_at_deadline", "failures_not_injected", "culprit", "restart_right")
"""Expectations judged by the harness's own checks, not against a metric: the first three whether given or
not, the attribution ones (chaos/judge/attribution.py) when given."""
TIMEOUT_BOUNDED = ("time_to_detect_s", "time_to_detect_last_s")
"""Expectations whose limits may add ``timeouts``: the detections, which an FT heartbeat timeout bounds."""


class ExpectedFailure(Strict):
    """A failure that no injected fault causes and that the scenario expects, by name: an external
    trainer's own crash, a config the trainer refuses. It accounts for the unexplained failure whose cause
    line contains ``cause`` (in ``attempt``, when given); any other unexplained failure fails the run."""

    name: str = Field(min_length=1)
    cause: str = Field(min_length=1)
    attempt: int | None = Field(default=None, ge=0)


CulpritSource = Literal["rank_monitor", "flight_recorder", "straggler", "rerun"]
"""A source of culprit claims (chaos/judge/culprit.py, SOURCES)."""
CulpritCause = Literal["hang", "straggler", "nan", "spike", "crash", "disk", "network"]
"""A claim's cause (chaos/judge/attribution.py, EXPECTED_CAUSES)."""


class ExpectedCulprit(Strict):
    """The culprit the stack must name: a rank, a node (a claim of one of its ranks counts), a cause, or
    several. ``sources``: each of them must name it; left out, at least one source must, and none may name
    another (a healthy rank or node blamed fails it either way)."""

    rank: int | None = Field(default=None, ge=0)
    node: str | None = Field(default=None, min_length=1)
    cause: CulpritCause | None = None
    sources: list[CulpritSource] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _names_something(self) -> ExpectedCulprit:
        if self.rank is None and self.node is None and self.cause is None:
            raise ValueError("a culprit needs rank, node or cause")
        return self


class Expect(Strict):
    """What a recovered run must show. Every field is optional; each given one is a verdict. A scenario that
    states nothing of how the run ends (neither exit_code, trainer_exit_codes nor killed_at_deadline)
    expects a clean exit: exit_code 0."""

    exit_code: int | None = None
    restarts: Limit | None = None
    resumed_from_step: int | None = Field(default=None, ge=0)
    completed_steps: int | None = Field(default=None, ge=0)
    lost_steps: Limit | None = None
    time_to_detect_s: Limit | None = None
    time_to_recover_s: Limit | None = None
    time_to_detect_last_s: Limit | None = None
    """time_to_detect of the last fault: with learned timeouts, a second hang is caught sooner."""
    heartbeat_timeout_last_s: Limit | None = None
    """The FT heartbeat timeout in force where the last fault struck (its rank's last ``ft_timeouts`` before it):
    below the configured one when timeouts learned earlier were loaded."""
    goodput: Limit | None = None
    slowest_step_s: Limit | None = None
    """Rank 0's longest step in the run's final lineage: a degraded link or a slow rank stretches it."""
    longest_step_gap_s: Limit | None = None
    """Rank 0's longest time from one step to the next of the same attempt, from the first fault on (saves and
    stalls between them count): whether training went on through a stalled save."""
    steps_during_async_save: Limit | None = None
    """Steps rank 0 completed while async saves were in flight (0 for sync saves: training waited)."""
    steps_during_stall: Limit | None = None
    """Steps rank 0 completed while the run's storage was stopped (storage_stall): training went on through it."""
    faults_injected: Limit | None = None
    """Faults that fired (in the trainer or from the runner): compound scenarios check every one did."""
    checkpoints_rejected: Limit | None = None
    """Checkpoints the trainer found corrupt on load and skipped."""
    stale_resumes: Limit | None = None
    """Restarts that resumed from another checkpoint than the newest that retention (checkpoint.most_recent_k)
    keeps and no fault destroyed: a pruned or skipped one (max 0)."""
    checkpoints_saved: tuple[Annotated[int, Field(ge=1)], ...] | None = None
    """The iterations rank 0 saved a checkpoint of, in order, every attempt's: a failed (skipped) save is not one."""
    preemption_saved: bool | None = None
    """A checkpoint was sealed between the first SIGTERM and the end of its grace period."""
    grace_killed: bool | None = None
    """The runner had to SIGKILL processes that outlived a SIGTERM's grace period."""
    exit_reason: str | None = None
    """Rank 0's last exit reason (completed, straggler_detected, ...; docs/events.md)."""
    saved_at_exit: bool | None = None
    """Rank 0's last exit came right after a checkpoint of that very step (a stop that saved first)."""
    stragglers_flagged: list[Annotated[int, Field(ge=0)]] | None = None
    """Every rank any straggler report flagged, sorted; [] wants reports that flag nobody."""
    reports_to_flag: Limit | None = None
    """Straggler reports from the fault up to the first that flags its rank (1: the first report after it)."""
    inprocess_restarts: Limit | None = None
    """Times NVRx's in-process Wrapper re-entered the training function."""
    trainer_exit_codes: list[int] | None = None
    """Per launch, the trainer's own exit code (rank 0's last `exit`); the launcher's differs (torchrun: 1)."""
    learned_timeouts_used: bool | None = None
    """The last attempt started with FT timeouts calculated from earlier attempts (ft_state.json), as its
    first `ft_timeouts` event says."""
    rerun_diagnosis: str | None = None
    """The rerun state machine's last diagnosis (transient_error, persistent_error, correct_result, ...)."""
    world_size_after: int | None = Field(default=None, ge=1)
    """The world size of the last restart round (a multi-node run that lost a node may shrink)."""
    nodes_after: list[str] | None = None
    """The node identities (CHAOS_NODE_ID) of the last restart round's ranks, sorted: who took over."""
    launches: Limit | None = None
    """Times the job was launched (a relaunch, a Slurm requeue: one more each)."""
    slurm_job_state: str | None = None
    """The job's final state as Slurm records it (`scontrol show job`: COMPLETED, FAILED, TIMEOUT, ...)."""
    slurm_exit_code: str | None = None
    """The job's exit code as Slurm records it, `code:signal` (0:0)."""
    resume_source: Literal["local", "persistent", "none"] | None = None
    """What the first restart after the fault resumed from: an NVRx local checkpoint, a persistent one, or none."""
    timeout_won: Literal["nccl_watchdog", "inprocess", "ft_launcher"] | None = None
    """Which timeout acted first on the fault: PyTorch's NCCL watchdog, NVRx's in-process restart, or ft_launcher's rank monitor."""
    worker_signal: SignalName | None = None
    """The signal the first worker that died of one after the fault died of, as the launcher reports it
    (exitcode -11: SIGSEGV; -6: SIGABRT; -9: SIGKILL)."""
    stopped_for_no_progress: int | None = Field(default=None, ge=1)
    """NVRx 0.7's progress tracker stopped the job after this many cycles (cycle 0 included)."""
    restart_time_saved_s: Limit | None = None
    """What that stop saved against burning every restart: restarts left unused x the mean cycle."""
    health_check_failed: str | None = None
    """The first of ft_launcher's health checks before a rendezvous that failed (NVRx 0.7: "Storage path
    health check", "NIC link state health check", ...), or "none"."""
    pitfalls: list[PitfallName] | None = None
    """The resiliency card's pitfalls the run must show, exactly (a harness verdict: left out, it wants none)."""
    killed_at_deadline: bool | None = None
    """The run must outlive its deadline (a hang nothing detects); the harness's deadline verdict then wants that."""
    failures_not_injected: list[ExpectedFailure] | None = None
    """Failures no injected fault explains that the run must show, exactly (a harness verdict: left out, it
    wants none; chaos/judge/accounting.py)."""
    culprit: ExpectedCulprit | None = None
    """The culprit the stack must name, from its claims (chaos/judge/culprit.py): {rank: 1}, {node: node1}, {cause: hang}."""
    restart_right: bool | None = None
    """true: the stack's decision after every fault (restart in place, or not) is the one the fault wants
    (chaos/judge/attribution.py); the decision is reported for every run whether asked or not."""
    baseline: BaselineSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _clean_exit_by_default(cls, data: Any) -> Any:
        stated = ("exit_code", "trainer_exit_codes", "killed_at_deadline")  # each says how the run ends
        if isinstance(data, dict) and not any(key in data for key in stated):
            data = {**data, "exit_code": 0}
        if isinstance(data, dict) and isinstance(data.get("checkpoints_saved"), list):  # YAML's list, the metric's tuple
            data = {**data, "checkpoints_saved": tuple(data["checkpoints_saved"])}
        return data

    @model_validator(mode="after")
    def _timeouts_bound_detections(self) -> Expect:
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, Limit) and value.timeouts is not None and name not in TIMEOUT_BOUNDED:
                raise ValueError(f"{name}.timeouts: only {' and '.join(TIMEOUT_BOUNDED)} are bounded by a timeout")
        return self


HARNESS_VERDICTS = ("deadline", "processes_reaped", "faults_found_targets", "unexplained_failures", "pitfalls")
"""The verdicts every run gets whatever its expectations (chaos/judge/verdicts.py)."""


class KnownFailure(Strict):
    """A recovery that fails today for a reason outside the harness (an upstream bug, named in `reason`).

    The run is judged as usual; it is a known failure when exactly `verdicts` fail and the run's output
    contains `signature` (the upstream error as it prints). Anything else is a failure: those verdicts
    passing (fixed upstream), others failing, or another error, so a change of behaviour shows red.
    """

    reason: str = Field(min_length=1)
    verdicts: list[str] = Field(min_length=1)
    signature: str | None = Field(default=None, min_length=1)
    may_also_fail: list[str] = Field(default_factory=list)
    """Verdicts the failure leaves to chance (a limit it puts on the edge), pass or fail: never one of
    `verdicts`."""
    only_without: list[Literal["transformer-engine", "nvidia-resiliency-ext>=0.7", "torch>=2.13"]] = Field(default_factory=list)
    """The failure is known only where none of these packages is installed (an upstream fallback path's
    bug), or none at that version (a bug fixed there); where one is, the run is judged on its expectations
    alone and must pass them."""
    only_with: list[Literal["nvidia-resiliency-ext>=0.7", "fewer-gpus-than-ranks-per-node"]] = Field(default_factory=list)
    """The failure is known only where all of these hold: a package at that version (a bug it brought), or
    ``fewer-gpus-than-ranks-per-node`` (nvidia-smi lists fewer GPUs than the scenario has ranks on a node:
    a check that assumes a GPU per local rank); elsewhere the run must pass its expectations."""
