"""The scenario schema and its loader: what to break and what recovery to expect.

Strict by design: an unknown key, a wrong type, a rank outside the world, a step past train_iters or a
limit that cannot hold is a :class:`ScenarioError` raised before anything is launched. Its message is one
line, ``<file>: <field path>: <problem>``, with the path as the author wrote it (``faults[0].rank``).
docs/scenarios.md documents every field.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from trainer.config import ConfigError, TrainerConfig
from trainer.config_loader import load_config
from trainer.recipes import recipe_values

SCHEMA_VERSION = 1
RUNNER_KEYS = ("checkpoint.save", "logger.run_dir", "fault_injection.component", "fault_injection.plan")
"""Trainer settings the runner sets (paths into the run folder, the injector that fires the plan); a scenario
may not set them: it never names code to run."""


class ScenarioError(ValueError):
    """A scenario file is wrong; the message is one line: ``<file>: <field path>: <problem>``."""


def _show(value: Any) -> str:
    """A value as a message quotes it: YAML words, one line, short."""
    if isinstance(value, (dict, list)):
        return "a mapping" if isinstance(value, dict) else "a list"
    text = "null" if value is None else str(value).lower() if isinstance(value, bool) else repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        # Before pydantic's own extra="forbid" check, whose message does not say which keys exist.
        if isinstance(data, dict):
            for key in data:
                if key not in cls.model_fields:
                    ctx = {"key": key, "known": ", ".join(cls.model_fields)}
                    raise PydanticCustomError("unknown_key", "unknown key; known: {known}", ctx)
        return data


class Limit(_Strict):
    """A bound on a measured number: {min: a, max: b}; either may be left out. A bare number means both."""

    min: float | None = None
    max: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_number(cls, value: Any) -> Any:
        if isinstance(value, (dict, Limit)):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return {"min": value, "max": value}
        raise ValueError(f"expected a number or {{min: a, max: b}}, got {_show(value)}")

    @model_validator(mode="after")
    def _can_hold(self) -> Limit:
        if self.min is None and self.max is None:
            raise ValueError("a limit needs min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min:g}) is greater than max ({self.max:g}): no value can hold")
        return self

    def holds(self, value: float) -> bool:
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)

    def describe(self) -> str:
        if self.min == self.max:
            return f"== {self.min:g}"
        parts = [f">= {self.min:g}" if self.min is not None else "", f"<= {self.max:g}" if self.max is not None else ""]
        return " and ".join(p for p in parts if p)


class _FaultBase(_Strict):
    rank: int | None = Field(default=None, ge=0)
    """The target rank; None lets the seeded plan choose (random only)."""
    at_step: int | None = Field(default=None, ge=1)
    """Fire just before this step (1-based) computes."""
    after_s: float | None = Field(default=None, ge=0)
    """Fire after base_delay + 0.2*U(0,1)*base_delay seconds (Megatron Bridge's simulate_fault timing)."""
    attempt: int = Field(default=0, ge=0)
    """The restart round in which the fault fires (0: the first launch)."""

    @model_validator(mode="after")
    def _one_trigger(self) -> _FaultBase:
        if (self.at_step is None) == (self.after_s is None):
            raise ValueError("give exactly one trigger: at_step or after_s")
        return self


class RankKilled(_FaultBase):
    """SIGKILL to the rank (a crashed process)."""

    type: Literal["rank_killed"]


class RankHung(_FaultBase):
    """SIGSTOP to the rank (a hung process: alive, silent)."""

    type: Literal["rank_hung"]


class RandomFault(_FaultBase):
    """rank_killed or rank_hung on a rank, both chosen from the scenario seed."""

    type: Literal["random"]


class ExceptionFault(_FaultBase):
    """A Python exception raised in the step on the rank (a bug, a failed assertion): the rank exits 1."""

    type: Literal["exception"]
    message: str = "injected by the chaos plan"


def _require_at_step(fault: _FaultBase) -> None:
    if fault.at_step is None or fault.after_s is not None:
        raise ValueError(f"{fault.type} fires at a step: give at_step (not after_s)")


def _require_load_trigger(fault: _FaultBase) -> None:
    if fault.at_step is not None or fault.after_s is not None:
        raise ValueError(f"{fault.type} fires at the checkpoint load of its attempt: leave out at_step and after_s")
    if fault.attempt < 1:
        raise ValueError(f"{fault.type} breaks a restart's checkpoint load: attempt must be 1 or more")


class CollectiveHang(_FaultBase):
    """The rank stops inside the gradient all-reduce of `at_step` (a wrapped DDP communication hook)."""

    type: Literal["collective_hang"]

    @model_validator(mode="after")
    def _one_trigger(self) -> CollectiveHang:
        _require_at_step(self)
        return self


class FaultDuringCheckpoint(_FaultBase):
    """SIGKILL to the rank while a checkpoint is in flight: the save of `at_step` (sync: inside the save;
    async: after the save was issued, before it is sealed), or the checkpoint load of `attempt`."""

    type: Literal["fault_during_checkpoint"]
    during: Literal["save", "load"] = "save"

    @model_validator(mode="after")
    def _one_trigger(self) -> FaultDuringCheckpoint:
        if self.during == "load":
            _require_load_trigger(self)
        else:
            _require_at_step(self)
        return self


class CheckpointCorrupt(_FaultBase):
    """The newest checkpoint truncated or garbled by `rank` just before the load of `attempt`."""

    type: Literal["checkpoint_corrupt"]
    rank: int | None = Field(default=0, ge=0)
    mode: Literal["truncate", "garble"] = "truncate"

    @model_validator(mode="after")
    def _one_trigger(self) -> CheckpointCorrupt:
        _require_load_trigger(self)
        return self


class _SignalFault(_FaultBase):
    """A real signal sent by the runner from outside to real pids: to `rank`, to `ranks`, or to a
    `target` (all ranks, or the launcher). Works on any training command, not only this project's."""

    ranks: list[Annotated[int, Field(ge=0)]] | None = Field(default=None, min_length=1)
    target: Literal["all", "launcher"] | None = None

    @model_validator(mode="after")
    def _one_target(self) -> _SignalFault:
        given = [name for name in ("rank", "ranks", "target") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one target: rank, ranks or target (all | launcher)")
        return self


class Sigterm(_SignalFault):
    """Preemption: SIGTERM, then SIGKILL to whatever is still alive `grace_s` seconds later."""

    type: Literal["sigterm"]
    grace_s: float = Field(default=30.0, ge=0)


class Sigkill(_SignalFault):
    """SIGKILL from outside (an OOM killer, a node agent)."""

    type: Literal["sigkill"]


class Sigstop(_SignalFault):
    """SIGSTOP from outside: the processes hang until something kills them."""

    type: Literal["sigstop"]


class DutyCycle(_SignalFault):
    """Slowness from outside: `cycles` rounds of SIGSTOP for `stop_s`, then SIGCONT for `run_s`."""

    type: Literal["duty_cycle"]
    stop_s: float = Field(gt=0)
    run_s: float = Field(gt=0)
    cycles: int = Field(ge=1)


SIGNAL_FAULTS = frozenset({"sigterm", "sigkill", "sigstop", "duty_cycle"})
"""Fault types the runner delivers from outside; every other type is fired inside the trainer."""


class _NodeFault(_FaultBase):
    """A fault of a whole node of a multi-node scenario (chaos/nodes.py), delivered by the runner.

    Node 0 hosts the c10d rendezvous store (as the first node of a cluster job does), so it cannot be lost:
    its store is the rendezvous itself."""

    node: int = Field(ge=1)


class NodeKilled(_NodeFault):
    """SIGKILL to the node's launcher agent and every process it started (a node lost)."""

    type: Literal["node_killed"]


class NodeHung(_NodeFault):
    """SIGSTOP to every rank of the node: its agent lives on, its ranks go silent."""

    type: Literal["node_hung"]


class NodeRejoin(_NodeFault):
    """A replacement agent for a killed node joins the rendezvous, `after_s` into round `attempt`."""

    type: Literal["node_rejoin"]

    @model_validator(mode="after")
    def _one_trigger(self) -> NodeRejoin:
        if self.after_s is None or self.at_step is not None:
            raise ValueError("node_rejoin fires by time in the round after the loss: give after_s (not at_step)")
        if self.attempt < 1:
            raise ValueError("node_rejoin joins a later rendezvous round: attempt must be 1 or more")
        return self


NODE_FAULTS = frozenset({"node_killed", "node_hung", "node_rejoin"})
"""Fault types of a whole node, delivered by the runner to a multi-node scenario's agents and ranks."""

class SlowRank(_FaultBase):
    """The rank computes slower from its trigger on (chaos/slow_rank.py): each forward pass `factor` times
    as long, or `seconds` more per step, on CPU; a competing CUDA stream on its device on GPU."""

    type: Literal["slow_rank"]
    factor: float | None = Field(default=None, gt=1)
    seconds: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_amount(self) -> SlowRank:
        if (self.factor is None) == (self.seconds is None):
            raise ValueError("give exactly one slowdown: factor (> 1) or seconds (> 0 per step)")
        return self


class _LossFault(_FaultBase):
    """The rank's loss corrupted before its backward at `at_step` (the trainer's on_loss hook): `transient`
    in the first computation of the step only, `persistent` in every computation on the faulty node (the
    first launch's node identity), whatever the attempt; a relaunch with another CHAOS_NODE_ID is clean."""

    persistence: Literal["transient", "persistent"] = "transient"

    @model_validator(mode="after")
    def _at_step_only(self) -> _LossFault:
        _require_at_step(self)
        return self


class NanLoss(_LossFault):
    """The loss becomes NaN (and so do the gradients): the rerun state machine's NaN check."""

    type: Literal["nan_loss"]


class SpikyLoss(_LossFault):
    """The loss is multiplied by `factor`: the rerun state machine's spiky-loss check (non-fatal)."""

    type: Literal["spiky_loss"]
    factor: float = Field(default=1000.0, gt=1)


LOSS_FAULTS = frozenset({"nan_loss", "spiky_loss"})
"""Fault types that corrupt the loss inside the trainer."""

Fault = Annotated[
    RankHung | RankKilled | RandomFault | ExceptionFault | CollectiveHang | FaultDuringCheckpoint
    | CheckpointCorrupt | Sigterm | Sigkill | Sigstop | DutyCycle | SlowRank | NanLoss | SpikyLoss
    | NodeKilled | NodeHung | NodeRejoin,
    Field(discriminator="type"),
]


class FTLauncherOptions(_Strict):
    """ft_launcher's --ft-* options (NVRx FaultToleranceConfig names), and its restart policy."""

    initial_rank_heartbeat_timeout: float | None = Field(default=30.0, gt=0)
    rank_heartbeat_timeout: float | None = Field(default=5.0, gt=0)
    rank_section_timeouts: dict[str, Annotated[float, Field(gt=0)]] | None = None
    rank_out_of_section_timeout: float | None = Field(default=None, gt=0)
    workload_check_interval: float = Field(default=1.0, gt=0)
    safety_factor: float = Field(default=5.0, gt=0)
    """Learned timeouts (trainer ft.calc_ft_timeouts) are this factor times the longest interval observed."""
    term_timeout: float = Field(default=15.0, gt=0)
    """Seconds the launcher waits after SIGTERM before SIGKILL when it stops workers (NVRx tests use 15)."""
    gpu_memory_reclaim_timeout: float | None = Field(default=None, ge=0)
    """NVRx 0.5+: after stopping workers, wait up to this long until the node's GPUs hold almost nothing
    (None: NVRx's default, 50 s in 0.7; 0: no wait). Runs packed onto shared GPUs turn it off."""


class Baseline(_Strict):
    """Compare with a fault-free run of the same config: exact bits, or losses within a tolerance."""

    tolerance: float = Field(ge=0)


def _baseline_kind(value: Any) -> str:
    return "tolerance" if isinstance(value, (dict, Baseline)) else "exact"


# A discriminator, so that a wrong value is reported against the one form it resembles.
BaselineSpec = Annotated[
    Annotated[Literal["exact"], Tag("exact")] | Annotated[Baseline, Tag("tolerance")],
    Discriminator(_baseline_kind),
]


class Expect(_Strict):
    """What a recovered run must show. Every field is optional; each given one is a verdict."""

    exit_code: int | None = None
    restarts: Limit | None = None
    resumed_from_step: int | None = Field(default=None, ge=0)
    completed_steps: int | None = Field(default=None, ge=0)
    lost_steps: Limit | None = None
    time_to_detect_s: Limit | None = None
    time_to_recover_s: Limit | None = None
    time_to_detect_last_s: Limit | None = None
    """time_to_detect of the last fault: with learned timeouts, a second hang is caught sooner."""
    goodput: Limit | None = None
    steps_during_async_save: Limit | None = None
    """Steps rank 0 completed while async saves were in flight (0 for sync saves: training waited)."""
    faults_injected: Limit | None = None
    """Faults that fired (in the trainer or from the runner): compound scenarios check every one did."""
    checkpoints_rejected: Limit | None = None
    """Checkpoints the trainer found corrupt on load and skipped."""
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
    rerun_diagnosis: str | None = None
    """The rerun state machine's last diagnosis (transient_error, persistent_error, correct_result, ...)."""
    world_size_after: int | None = Field(default=None, ge=1)
    """The world size of the last restart round (a multi-node run that lost a node may shrink)."""
    nodes_after: list[str] | None = None
    """The node identities (CHAOS_NODE_ID) of the last restart round's ranks, sorted: who took over."""
    baseline: BaselineSpec | None = None


def _override_value(value: Any) -> Any:
    finite = isinstance(value, float) and math.isfinite(value)
    if value is None or finite or isinstance(value, (bool, int, str)):
        return value
    raise ValueError(f"must be a number, a string, true, false or null, got {_show(value)}")


OverrideValue = Annotated[bool | int | float | str | None, BeforeValidator(_override_value)]


class Scenario(_Strict):
    schema_version: Literal[1] = 1
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str
    world_size: int = Field(ge=1, le=64)
    nodes: int = Field(default=1, ge=1, le=16)
    """Launcher agents, one per simulated node (node0..), meeting in one c10d rendezvous (chaos/nodes.py)."""
    procs_per_node: int | None = Field(default=None, ge=1)
    """Ranks per node; nodes * procs_per_node must be world_size (left out: world_size / nodes)."""
    spares: int = Field(default=0, ge=0, le=4)
    """Hot-spare agents, started once the first round trains: they wait in the rendezvous for a lost node."""
    launcher: Literal["ft_launcher", "torchrun"] = "ft_launcher"
    requires: Literal["any", "cpu", "gpu"] = "any"
    """Where the scenario applies: 'gpu' ones are skipped (with the reason) on CPU machines, 'cpu' ones on GPU runs."""
    recipe: str = "tiny_cpu"
    trainer: dict[str, OverrideValue] = Field(default_factory=dict)
    """Dotted trainer overrides, as on the trainer's command line."""
    ft: FTLauncherOptions = Field(default_factory=FTLauncherOptions)
    max_restarts: int = Field(default=3, ge=0)
    deadline_s: float = Field(default=120.0, gt=0)
    seed: int = Field(default=0, ge=0)
    relaunch: bool = False
    """After the launcher exits, launch the job once more in the same run folder (a requeued preempted job)."""
    relaunch_env: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], str] = Field(default_factory=dict)
    """Environment overrides of the relaunch, e.g. {CHAOS_NODE_ID: node-b}: the job resumes on another node."""
    command: list[Annotated[str, Field(min_length=1)]] | None = Field(default=None, min_length=1)
    """A training command this project did not write, run per rank instead of the trainer (`python` = this interpreter)."""
    step_pattern: str | None = None
    """For `command`: a regex over its output lines with a named group `step` (and optionally `loss`)."""
    faults: list[Fault] = Field(default_factory=list)
    expect: Expect = Field(default_factory=Expect)

    def trainer_overrides(self, run_dir: str | Path = "RUN_DIR") -> list[str]:
        """The trainer's command-line overrides: the scenario's, then the run folder's own paths.

        Values are written as YAML scalars, so the trainer reads back exactly the scenario's values.
        """
        own = {"checkpoint.save": f"{run_dir}/checkpoints", "logger.run_dir": str(run_dir)}
        return [f"{k}={_yaml_scalar(v)}" for k, v in {**self.trainer, **own}.items()]

    def trainer_config(self, run_dir: str | Path = "RUN_DIR") -> TrainerConfig:
        """The trainer config this scenario runs, validated by the trainer itself."""
        return load_config(self.recipe, None, self.trainer_overrides(run_dir))

    @field_validator("recipe")
    @classmethod
    def _known_recipe(cls, recipe: str) -> str:
        recipe_values(recipe)
        return recipe

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        for key in RUNNER_KEYS:
            if key in self.trainer:
                raise ValueError(f"trainer.{key}: set by the runner (inside the run folder); leave it out")
        try:
            cfg = self.trainer_config()
        except (ConfigError, ArithmeticError) as e:
            # ArithmeticError: values trainer.config does not catch itself (num_attention_heads 0, an integer
            # too large for a float field); still a one-line error, never a traceback.
            raise ValueError(f"trainer: {e}") from None
        self._check_faults(cfg)
        self._check_expect(cfg)
        self._check_command()
        self._check_nodes()
        if self.relaunch_env and not self.relaunch:
            raise ValueError("relaunch_env: set relaunch: true as well (it is the relaunch's environment)")
        return self

    @property
    def runs_alone(self) -> bool:
        """Its verdicts rest on how fast its ranks run against each other (straggler detection): another run
        sharing the machine's cores or GPUs would skew them, so a parallel test session runs it alone."""
        return self.trainer_config().nvrx_straggler.enabled

    @property
    def node_size(self) -> int:
        """Ranks per node (procs_per_node, or world_size / nodes)."""
        return self.procs_per_node or self.world_size // self.nodes

    def _check_nodes(self) -> None:
        """A multi-node scenario: a world that splits evenly over its nodes, and node faults that name one."""
        if self.nodes * self.node_size != self.world_size:
            raise ValueError(
                f"world_size: {self.world_size} is not nodes ({self.nodes}) x procs_per_node ({self.node_size})"
            )
        if self.nodes > 1 and (self.command is not None or self.relaunch):
            raise ValueError("nodes: a multi-node scenario runs this project's trainer, without command or relaunch")
        if self.spares and self.nodes == 1:
            raise ValueError("spares: hot spares join a multi-node rendezvous; set nodes to 2 or more")
        killed: set[int] = set()
        for i, fault in enumerate(self.faults):
            if fault.type not in NODE_FAULTS:
                continue
            if fault.rank is not None:
                raise ValueError(f"faults[{i}].rank: a {fault.type} fault names a node, not a rank")
            if fault.node >= self.nodes:
                raise ValueError(f"faults[{i}].node: {fault.node} is not a node of the run (nodes {self.nodes})")
            if fault.type == "node_rejoin" and fault.node not in killed:
                raise ValueError(f"faults[{i}].node: node_rejoin replaces a node an earlier node_killed fault lost")
            if fault.type == "node_killed":
                killed.add(fault.node)

    def _check_command(self) -> None:
        if self.command is None:
            if self.step_pattern is not None:
                raise ValueError("step_pattern: only for a `command` (the trainer writes step events)")
            return
        if self.trainer:
            raise ValueError("trainer: a `command` scenario runs its own command; leave trainer overrides out")
        if self.expect.baseline is not None:
            raise ValueError("expect.baseline: needs this project's trainer (a `command` writes no final weights)")
        for i, fault in enumerate(self.faults):
            if fault.type not in SIGNAL_FAULTS:
                raise ValueError(f"faults[{i}].type: {fault.type} fires inside this project's trainer; a `command` takes signal faults only")
        if self.step_pattern is not None:
            try:
                pattern = re.compile(self.step_pattern)
            except re.error as e:
                raise ValueError(f"step_pattern: not a regular expression ({e})") from None
            if "step" not in pattern.groupindex:
                raise ValueError("step_pattern: needs a named group (?P<step>\\d+)")
        elif any(f.at_step is not None for f in self.faults):
            raise ValueError("step_pattern: required when a fault of a `command` fires at_step")

    def last_attempt(self, cfg: TrainerConfig) -> tuple[int | None, str]:
        """The highest attempt the run can reach (None: no bound), and why.

        Each launch has max_restarts + 1 launcher rounds, a relaunch is one more launch, and under in-process
        restart each round has up to max_iterations attempts (NVRx's RetryController stops the Wrapper at
        iteration max_iterations; no bound when null).
        """
        rounds = (self.max_restarts + 1) * (2 if self.relaunch else 1)
        why = f"max_restarts {self.max_restarts}" + (", relaunch" if self.relaunch else "")
        if not cfg.inprocess_restart.enabled:
            return rounds - 1, why
        per_round = cfg.inprocess_restart.max_iterations
        if per_round is None:
            return None, why + ", in-process restarts unbounded"
        return rounds * per_round - 1, why + f", inprocess_restart.max_iterations {per_round}"

    def _check_faults(self, cfg: TrainerConfig) -> None:
        iters, world = cfg.train.train_iters, self.world_size
        sim_rank = cfg.ft.simulated_fault_rank
        last, why = self.last_attempt(cfg)
        if sim_rank is not None and not 0 <= sim_rank < world:
            raise ValueError(f"trainer.ft.simulated_fault_rank: {sim_rank} is outside the world (world_size {world})")
        for i, fault in enumerate(self.faults):
            if fault.rank is not None and fault.rank >= world:
                raise ValueError(f"faults[{i}].rank: {fault.rank} is outside the world (world_size {world})")
            for r in getattr(fault, "ranks", None) or ():
                if r >= world:
                    raise ValueError(f"faults[{i}].ranks: {r} is outside the world (world_size {world})")
            if fault.type != "random" and fault.rank is None and fault.type not in SIGNAL_FAULTS | NODE_FAULTS:
                raise ValueError(f"faults[{i}].rank: required for {fault.type} (only random may leave it out)")
            if fault.at_step is not None and self.command is None and fault.at_step > iters:
                raise ValueError(f"faults[{i}].at_step: {fault.at_step} is past train.train_iters ({iters})")
            interval = cfg.checkpoint.save_interval
            if fault.type == "fault_during_checkpoint" and fault.at_step and not (interval and fault.at_step % interval == 0):
                raise ValueError(f"faults[{i}].at_step: {fault.at_step} is not a checkpoint step (save_interval {interval})")
            if fault.after_s is not None and fault.after_s >= self.deadline_s:
                raise ValueError(f"faults[{i}].after_s: {fault.after_s:g} is past deadline_s ({self.deadline_s:g})")
            if last is not None and fault.attempt > last:
                raise ValueError(f"faults[{i}].attempt: {fault.attempt} is past the run's last attempt ({last}: {why})")

    def _check_expect(self, cfg: TrainerConfig) -> None:
        e, iters = self.expect, cfg.train.train_iters
        if e.completed_steps is not None and self.command is None and e.completed_steps > iters:
            raise ValueError(f"expect.completed_steps: {e.completed_steps} is past train.train_iters ({iters})")
        if e.resumed_from_step is not None:
            interval = cfg.checkpoint.save_interval
            if e.resumed_from_step > 0 and not interval:
                raise ValueError("expect.resumed_from_step: the trainer saves no checkpoints (set checkpoint.save_interval)")
            if e.resumed_from_step > iters or (interval and e.resumed_from_step % interval):
                raise ValueError(
                    f"expect.resumed_from_step: {e.resumed_from_step} is not a checkpoint step "
                    f"(save_interval {interval}, train_iters {iters})"
                )
        last, why = self.last_attempt(cfg)
        if e.restarts is not None and e.restarts.min is not None and last is not None and e.restarts.min > last:
            raise ValueError(f"expect.restarts: min {e.restarts.min:g} is past the run's last attempt ({last}: {why})")
        if e.lost_steps is not None and e.lost_steps.min is not None and e.lost_steps.min > iters:
            raise ValueError(f"expect.lost_steps: min {e.lost_steps.min:g} exceeds train.train_iters ({iters})")
        for name in ("time_to_detect_s", "time_to_recover_s"):
            limit = getattr(e, name)
            if limit is not None and limit.min is not None and limit.min > self.deadline_s:
                raise ValueError(f"expect.{name}: min {limit.min:g} is beyond deadline_s ({self.deadline_s:g})")
        bounds = (e.goodput.min, e.goodput.max) if e.goodput is not None else ()
        if any(v is not None and not 0 <= v <= 1 for v in bounds):
            raise ValueError("expect.goodput: min and max must lie within [0, 1]")


def _yaml_scalar(value: Any) -> str:
    """`value` as YAML that reads back as the same value: the string '5' stays a string, 1e-05 a float."""
    # The trainer reads an unquoted number-like word (1e-3, 0E0) as a number: quote such strings.
    style = "'" if isinstance(value, str) and _is_number_word(value) else None
    text = yaml.safe_dump(value, width=math.inf, default_style=style)  # escapes non-ASCII (a raw NEL would read back as a space)
    return text.removesuffix("\n...\n").removesuffix("\n")


def _is_number_word(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# The errors that say what was expected; every other pydantic message is reworded from "Input should ...".
_EXPECTED = {
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "dict_type": "must be a mapping",
    "list_type": "must be a list",
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
}
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.-]+")


def _user_loc(loc: tuple[int | str, ...]) -> list[Any]:
    """pydantic's location without the union branch it names after faults[i] and expect.baseline."""
    path = list(loc)
    if len(path) > 2 and (path[0] == "faults" or path[:2] == ["expect", "baseline"]):
        del path[2]
    return path


def _render(path: list[Any]) -> str:
    out = ""
    for key in path:
        if isinstance(key, str) and _PLAIN_KEY.fullmatch(key):
            out += f".{key}" if out else key
        else:
            out += f"[{_show(key)}]"
    return out


def _describe(error: ErrorDetails) -> str:
    """One pydantic error as ``field.path: problem``, in the words of the scenario's author."""
    path, kind, ctx = _user_loc(error["loc"]), error["type"], error.get("ctx", {})
    if kind == "unknown_key":
        path.append(ctx["key"])
        problem = error["msg"]
    elif kind == "union_tag_invalid":
        path.append("type")
        known = ", ".join(re.findall(r"'([^']*)'", ctx["expected_tags"]))
        problem = f"unknown fault type {_show(error['input']['type'])}; known: {known}"
    elif kind == "union_tag_not_found":
        path.append("type")
        problem = "required"
    elif kind == "missing":
        problem = "required"
    elif kind == "value_error":
        problem = error["msg"].removeprefix("Value error, ")
    elif path and path[-1] == "[key]":
        path.pop()
        problem = f"keys must be strings, got {_show(error['input'])}"
    else:
        expected = _EXPECTED.get(kind) or re.sub(r"^\w+ should", "must", error["msg"])
        problem = f"{expected}, got {_show(error['input'])}"
    where = _render(path)
    return f"{where}: {problem}" if where else problem


def parse_scenario(data: Any, source: str) -> Scenario:
    """Validate already-loaded data; every error is one line that starts with `source`."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario must be a mapping of fields, got {_show(data)}")
    version = data.get("schema_version", SCHEMA_VERSION)
    if type(version) is not int or version != SCHEMA_VERSION:
        raise ScenarioError(f"{source}: schema_version: {_show(version)} is not supported (use {SCHEMA_VERSION})")
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(f"{source}: {_describe(e.errors()[0])}") from None


def _yaml_problem(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e).partition("\n")[0] or type(e).__name__
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate one scenario file (YAML, safe loader); its `name` must be the file's stem."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ScenarioError(f"{p}: cannot read ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"{p}: not a text file (not UTF-8)") from None
    except yaml.YAMLError as e:
        raise ScenarioError(f"{p}: not valid YAML: {_yaml_problem(e)}") from None
    except RecursionError:
        raise ScenarioError(f"{p}: not valid YAML: nested too deeply") from None
    except ValueError as e:  # PyYAML reads `2001-02-30` as a date, and datetime refuses it
        raise ScenarioError(f"{p}: not valid YAML: {e}") from None
    if data is None:
        raise ScenarioError(f"{p}: the file is empty")
    scenario = parse_scenario(data, str(p))
    if scenario.name != p.stem:
        raise ScenarioError(f"{p}: name: {scenario.name!r} does not match the file name {p.stem!r}")
    return scenario


def scenario_files(folder: str | Path) -> list[Path]:
    """The scenario files of a folder (``*.yaml``), sorted by name."""
    return sorted(Path(folder).glob("*.yaml"))
