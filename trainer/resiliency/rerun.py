"""The rerun state machine (after Megatron-LM's megatron/core/rerun_state_machine.py), on gloo and NCCL.

Each step's local loss is validated (NaN/Inf, then spiky). On a failure every rank agrees, the RNG and the
data position are restored and the step is computed again in place:

    different result        transient error        fatal: exit 17 (no checkpoint); non-fatal: continue
    same result             reproducible           fatal: save a checkpoint, exit 16; non-fatal: continue
    resumed from that checkpoint on another node:  different -> persistent error, same -> correct result (17)
    resumed on the same node again:                exit 16 again, at most `max_same_node_reruns` times, then 17

The decision logic (:class:`RerunMachine`, this module) is pure: each rank turns its result into a
:class:`Report`, the reports of all ranks are gathered, and every rank derives the same :class:`Action` from
the same list, so ranks cannot disagree. The trainer component that computes, gathers, restores, saves and
exits around it is ``trainer.resiliency.rerun_step.RerunStateMachine``.

Bounding Megatron-LM issue #5281 (under in-job restart the same node exits 16 forever): every landing on
the suspicious node increments a count that is saved with the checkpoint (exit 16 re-saves the same
iteration so that the count survives); once it passes `max_same_node_reruns` the run exits 17 with the
diagnosis ``same_node_loop``, and so does every later restart from that checkpoint.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum
from typing import Any, Literal

from trainer.config_resiliency import RerunStateMachineConfig

EXIT_RESUME_TO_DISAMBIGUATE = 16
EXIT_FAILED_VALIDATION = 17
SPIKY_SAMPLES = 100
"""Megatron's num_samples: the first 100 values set the max, later ones are compared with it."""


class RerunMode(str, Enum):
    DISABLED = "disabled"
    VALIDATE_RESULTS = "validate_results"
    REPORT_DETERMINISM_STATS = "report_determinism_stats"


class RerunState(str, Enum):
    IDLE = "idle"
    """Between steps."""
    INITIAL_RUN = "initial_run"
    RERUNNING_IN_PLACE = "rerunning_in_place"
    WILL_RERUN_FROM_CHECKPOINT = "will_rerun_from_checkpoint"
    """Saved with the exit-16 checkpoint; the resumed run reruns the step."""
    RERUNNING_FROM_CHECKPOINT = "rerunning_from_checkpoint"
    STOPPED = "stopped"
    """An exit was decided; nothing follows in this process."""


_TRANSITIONS: dict[RerunState, frozenset[RerunState]] = {
    RerunState.IDLE: frozenset({RerunState.INITIAL_RUN}),
    RerunState.INITIAL_RUN: frozenset({RerunState.IDLE, RerunState.RERUNNING_IN_PLACE, RerunState.STOPPED}),
    RerunState.RERUNNING_IN_PLACE: frozenset(
        {RerunState.IDLE, RerunState.WILL_RERUN_FROM_CHECKPOINT, RerunState.STOPPED}
    ),
    RerunState.WILL_RERUN_FROM_CHECKPOINT: frozenset({RerunState.RERUNNING_FROM_CHECKPOINT}),
    RerunState.RERUNNING_FROM_CHECKPOINT: frozenset(
        {RerunState.IDLE, RerunState.WILL_RERUN_FROM_CHECKPOINT, RerunState.STOPPED}
    ),
    RerunState.STOPPED: frozenset(),
}


class Diagnosis(str, Enum):
    TRANSIENT_ERROR = "transient_error"
    """Not reproduced by the rerun in place."""
    REPRODUCIBLE = "reproducible"
    """Reproduced in place: another node must rerun it to attribute it."""
    PERSISTENT_ERROR = "persistent_error"
    """Reproduced on the suspicious node, not on another one: that node is faulty."""
    CORRECT_RESULT = "correct_result"
    """Reproduced on another node too: the result is right (possibly an application error)."""
    SAME_NODE_LOOP = "same_node_loop"
    """Resumed on the suspicious node more than `max_same_node_reruns` times: the bound of issue #5281."""
    RERUN_DISABLED = "rerun_disabled"
    """A fatal check failed with reruns disabled: the run stops with an error."""


class Vote(IntEnum):
    """One rank's verdict on one computation. Larger wins: all ranks act on the largest vote."""

    OK = 0
    FLAGGED = 1
    CONTINUE_TRANSIENT = 2
    CONTINUE_REPRODUCED = 3
    TRANSIENT = 4
    REPRODUCED = 5
    CORRECT = 6
    PERSISTENT = 7
    SAME_NODE = 8


class RerunExit(Exception):
    """Stop the run with a rerun exit code (16 or 17); trainer/session.py turns it into the exit code."""

    def __init__(self, code: int, diagnosis: str, message: str):
        super().__init__(message)
        self.code, self.diagnosis = code, diagnosis


class ResultValidationError(RuntimeError):
    """A fatal check failed with rerun_mode=disabled (Megatron raises a RuntimeError there too)."""


@dataclass(frozen=True)
class Report:
    vote: Vote
    value: float
    """The loss this computation gave on this rank (the spread to the initial run in determinism stats)."""


@dataclass(frozen=True)
class Action:
    kind: Literal["proceed", "rerun", "exit", "error"]
    state: RerunState
    diagnosis: Diagnosis | None = None
    code: int | None = None
    save: bool = False
    flagged: tuple[int, ...] = ()
    message: str = ""
    values: tuple[float, ...] = ()
    """Every rank's value of this computation: its loss (the spread to the initial run in determinism stats)."""

    @property
    def noteworthy(self) -> bool:
        """Worth a `rerun` event: plain steps and determinism-stats reruns carry no message."""
        return bool(self.message)


@dataclass(frozen=True)
class ErrorInjector:
    """Megatron's error_injection_rate / error_injection_type, decided identically on every rank.

    Megatron draws per rank (random.randint + rank), so ranks disagree about whether anything was
    injected; here one draw from (seed, iteration) picks both the step (1 in `rate`) and the victim rank.
    """

    rate: int
    kind: Diagnosis
    seed: int
    world_size: int

    def victim(self, iteration: int) -> int | None:
        if self.rate <= 0:
            return None
        rng = random.Random(f"rerun-error-injection:{self.seed}:{iteration}")
        if rng.randrange(self.rate):
            return None
        return rng.randrange(self.world_size)


def same_result(a: float, b: float) -> bool:
    """Bitwise-equal floats, NaN equal to NaN (tolerance 0: Megatron's default comparison)."""
    return a == b or (math.isnan(a) and math.isnan(b))


def relative_spread(a: float, b: float) -> float:
    """|a - b| relative to their mean (Megatron's comparison); inf when only one is finite."""
    if same_result(a, b):
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs((a - b) / (a + b) * 2) if a + b else math.inf


@dataclass
class SpikyTracker:
    """Megatron's is_unexpectedly_large: the first SPIKY_SAMPLES values set the max; later |v| >= max*factor."""

    factor: float
    count: int = 0
    max_value: float = 0.0

    def is_spike(self, value: float) -> bool:
        v = abs(value)
        if not math.isfinite(v):
            return False  # NaN and Inf are the NaN check's business
        if self.count < SPIKY_SAMPLES:
            self.count += 1
            self.max_value = max(self.max_value, v)
            return False
        return v >= self.max_value * self.factor


@dataclass
class RerunMachine:
    """The per-rank state machine; pure (no torch), so tests can run several ranks side by side."""

    mode: RerunMode
    rank: int
    here: str
    """This rank's node and device ("node/cpu:0"): a rerun from checkpoint must run elsewhere."""
    check_nan: bool = True
    check_spiky: bool = False
    max_same_node_reruns: int = 2
    injector: ErrorInjector | None = None
    spiky: SpikyTracker = field(default_factory=lambda: SpikyTracker(10.0))
    state: RerunState = RerunState.IDLE
    iteration: int = 0
    failed_check: str | None = None
    """'nan', 'spiky' or 'injected' when this rank's initial run failed a check."""
    initial_value: float | None = None
    injected: Diagnosis | None = None
    suspicious: str | None = None
    same_node_reruns: int = 0
    steps_in_process: int = 0
    spreads: list[float] = field(default_factory=list)

    def _go(self, new: RerunState) -> None:
        if new not in _TRANSITIONS[self.state]:
            raise RuntimeError(f"rerun state machine: no transition {self.state.value} -> {new.value}")
        self.state = new

    # ------------------------------------------------------------------------------------- a step
    def start_step(self, iteration: int) -> None:
        """Before the step's first computation: a fresh initial run, or the rerun a checkpoint asked for."""
        self.steps_in_process += 1
        if self.state is RerunState.WILL_RERUN_FROM_CHECKPOINT:
            if iteration != self.iteration:
                raise RuntimeError(f"rerun state machine: checkpoint asks to rerun step {self.iteration}, not {iteration}")
            self._go(RerunState.RERUNNING_FROM_CHECKPOINT)
            return
        self._go(RerunState.INITIAL_RUN)
        self.iteration = iteration
        self.failed_check = self.initial_value = self.injected = None

    def record(self, value: float) -> Report:
        """This rank's verdict on one computation of the step, to be gathered from every rank."""
        if self.state is RerunState.INITIAL_RUN:
            return self._record_initial(value)
        if self.mode is RerunMode.REPORT_DETERMINISM_STATS:
            return Report(Vote.OK, relative_spread(self.initial_value, value))
        if self.failed_check is None:
            return Report(Vote.OK, value)
        if self.state is RerunState.RERUNNING_IN_PLACE:
            return Report(self._vote_in_place(value), value)
        return Report(self._vote_elsewhere(value), value)

    def _record_initial(self, value: float) -> Report:
        if self.mode is RerunMode.REPORT_DETERMINISM_STATS:
            self.initial_value = value
            return Report(Vote.FLAGGED, value)
        if self.mode is RerunMode.VALIDATE_RESULTS and self.steps_in_process == 1:
            return Report(Vote.OK, value)  # Megatron: no checkpoint can be taken before one optimizer step
        self.failed_check = self._failed_check(value)
        if self.failed_check is None:
            return Report(Vote.OK, value)
        self.initial_value = value
        fatal = self.failed_check != "spiky"
        vote = Vote.FLAGGED if fatal or self.mode is RerunMode.VALIDATE_RESULTS else Vote.CONTINUE_TRANSIENT
        return Report(vote, value)

    def _failed_check(self, value: float) -> str | None:
        injector = self.injector if self.mode is RerunMode.VALIDATE_RESULTS else None
        if injector is not None and injector.victim(self.iteration) == self.rank:
            self.injected = injector.kind
            return "injected"
        if self.check_nan and not math.isfinite(value):
            return "nan"
        if self.check_spiky and self.spiky.is_spike(value):
            return "spiky"
        return None

    def _same(self, value: float, injected_same: bool) -> bool:
        return injected_same if self.injected is not None else same_result(self.initial_value, value)

    def _vote_in_place(self, value: float) -> Vote:
        same = self._same(value, self.injected is not Diagnosis.TRANSIENT_ERROR)
        if self.failed_check == "spiky":
            return Vote.CONTINUE_REPRODUCED if same else Vote.CONTINUE_TRANSIENT
        if same:
            self.suspicious = self.here
            return Vote.REPRODUCED
        return Vote.TRANSIENT

    def _vote_elsewhere(self, value: float) -> Vote:
        if self.here == self.suspicious:
            return Vote.SAME_NODE
        if self.failed_check == "spiky":
            return Vote.CONTINUE_REPRODUCED
        return Vote.CORRECT if self._same(value, self.injected is Diagnosis.CORRECT_RESULT) else Vote.PERSISTENT

    def decide(self, reports: Sequence[Report]) -> Action:
        """Every rank's reports of this computation -> what every rank does next (the same on all)."""
        return replace(self._decide(reports), values=tuple(r.value for r in reports))

    def _decide(self, reports: Sequence[Report]) -> Action:
        top = max(r.vote for r in reports)
        flagged = tuple(i for i, r in enumerate(reports) if r.vote > Vote.OK)
        if self.state is RerunState.INITIAL_RUN:
            return self._after_initial(top, flagged, reports)
        if self.mode is RerunMode.REPORT_DETERMINISM_STATS:
            self.spreads.append(max(r.value for r in reports))
            self._go(RerunState.IDLE)
            return Action("proceed", self.state, message=f"spread {self.spreads[-1]:.3g} (max so far {max(self.spreads):.3g})")
        if self.state is RerunState.RERUNNING_IN_PLACE:
            return self._after_in_place(top, flagged)
        return self._after_elsewhere(top, flagged)

    def _after_initial(self, top: Vote, flagged: tuple[int, ...], reports: Sequence[Report]) -> Action:
        if top is Vote.OK:
            self._go(RerunState.IDLE)
            return Action("proceed", self.state)
        fatal = tuple(r for r in flagged if reports[r].vote is Vote.FLAGGED)
        if self.mode is RerunMode.DISABLED and fatal:
            self._go(RerunState.STOPPED)
            failures = "; ".join(
                f"Rank {r}, iteration {self.iteration}: Unexpected result {reports[r].value} "
                "(message='loss is NaN or Inf'; rerun_state_machine.rerun_mode=disabled)"
                for r in fatal
            )
            return Action("error", self.state, Diagnosis.RERUN_DISABLED, code=1, flagged=flagged, message=failures)
        if self.mode is RerunMode.DISABLED:
            self._go(RerunState.IDLE)
            return Action("proceed", self.state, flagged=flagged, message="spiky loss (reruns disabled): continuing")
        self._go(RerunState.RERUNNING_IN_PLACE)
        if self.mode is RerunMode.REPORT_DETERMINISM_STATS:
            return Action("rerun", self.state)  # every step: reported once, with its spread
        return Action("rerun", self.state, flagged=flagged, message="rerunning the step in place")

    def _after_in_place(self, top: Vote, flagged: tuple[int, ...]) -> Action:
        if top <= Vote.CONTINUE_REPRODUCED:
            self._go(RerunState.IDLE)
            diagnosis = Diagnosis.REPRODUCIBLE if top is Vote.CONTINUE_REPRODUCED else Diagnosis.TRANSIENT_ERROR
            return Action("proceed", self.state, diagnosis, flagged=flagged, message="non-fatal: continuing")
        if top is Vote.TRANSIENT:
            self._go(RerunState.STOPPED)
            return Action(
                "exit", self.state, Diagnosis.TRANSIENT_ERROR, EXIT_FAILED_VALIDATION, flagged=flagged,
                message="the rerun in place gave a different result: possible transient error",
            )
        self._go(RerunState.WILL_RERUN_FROM_CHECKPOINT)
        return Action(
            "exit", self.state, Diagnosis.REPRODUCIBLE, EXIT_RESUME_TO_DISAMBIGUATE, save=True, flagged=flagged,
            message="the rerun in place reproduced the result: resume from the checkpoint on another node",
        )

    def _after_elsewhere(self, top: Vote, flagged: tuple[int, ...]) -> Action:
        if top is Vote.SAME_NODE:
            self.same_node_reruns += 1
            if self.same_node_reruns > self.max_same_node_reruns:
                self._go(RerunState.STOPPED)
                return Action(
                    "exit", self.state, Diagnosis.SAME_NODE_LOOP, EXIT_FAILED_VALIDATION, flagged=flagged,
                    message=f"resumed on the suspicious node {self.same_node_reruns} times "
                    f"(limit {self.max_same_node_reruns}): cannot attribute the failure; drain that node",
                )
            self._go(RerunState.WILL_RERUN_FROM_CHECKPOINT)
            return Action(
                "exit", self.state, Diagnosis.REPRODUCIBLE, EXIT_RESUME_TO_DISAMBIGUATE, save=True, flagged=flagged,
                message=f"resumed on the suspicious node again ({self.same_node_reruns}/{self.max_same_node_reruns})",
            )
        if top in (Vote.PERSISTENT, Vote.CORRECT):
            self._go(RerunState.STOPPED)
            persistent = top is Vote.PERSISTENT
            return Action(
                "exit", self.state, Diagnosis.PERSISTENT_ERROR if persistent else Diagnosis.CORRECT_RESULT,
                EXIT_FAILED_VALIDATION, flagged=flagged,
                message="not reproduced on another node: possible persistent error" if persistent
                else "reproduced on another node: correct result (possible application error)",
            )
        self._go(RerunState.IDLE)
        return Action("proceed", self.state, flagged=flagged, message="non-fatal: continuing")

    # ------------------------------------------------------------------------------- checkpointing
    def state_dict(self) -> dict[str, Any]:
        """Plain types only: the checkpointer loads rank state with torch.load(weights_only=True)."""
        return {
            "state": self.state.value, "iteration": self.iteration, "failed_check": self.failed_check,
            "initial_value": self.initial_value, "injected": self.injected.value if self.injected else None,
            "suspicious": self.suspicious, "same_node_reruns": self.same_node_reruns,
            "spiky_count": self.spiky.count, "spiky_max": self.spiky.max_value,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state:
            return
        resumable = (RerunState.IDLE, RerunState.WILL_RERUN_FROM_CHECKPOINT)
        loaded = RerunState(state["state"])
        # A run with reruns disabled ignores a pending rerun, as Megatron does.
        self.state = loaded if loaded in resumable and self.mode is not RerunMode.DISABLED else RerunState.IDLE
        self.iteration, self.failed_check = state["iteration"], state["failed_check"]
        self.initial_value, self.suspicious = state["initial_value"], state["suspicious"]
        self.injected = Diagnosis(state["injected"]) if state["injected"] else None
        self.same_node_reruns = state["same_node_reruns"]
        self.spiky.count, self.spiky.max_value = state["spiky_count"], state["spiky_max"]


def machine_from_config(cfg: RerunStateMachineConfig, rank: int, world_size: int, here: str, seed: int) -> RerunMachine:
    mode = RerunMode(cfg.rerun_mode)
    injector = None
    if cfg.error_injection_rate > 0:
        injector = ErrorInjector(cfg.error_injection_rate, Diagnosis(cfg.error_injection_type), seed, world_size)
    return RerunMachine(
        mode, rank, here, cfg.check_for_nan_in_loss, cfg.check_for_spiky_loss, cfg.max_same_node_reruns,
        injector, SpikyTracker(cfg.spiky_loss_factor),
    )
