"""The scenario schema and its loader: what to break and what recovery to expect.

Strict by design: an unknown key, a wrong type, a rank outside the world, a step past train_iters or a
limit that cannot hold is a :class:`ScenarioError` naming the file and the field, raised before anything
is launched. docs/scenarios.md documents every field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trainer.config import ConfigError, TrainerConfig, load_config

SCHEMA_VERSION = 1


class ScenarioError(ValueError):
    """A scenario file is wrong; the message starts with the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Limit(_Strict):
    """A bound on a measured number: {min: a, max: b}; either may be left out."""

    min: Optional[float] = None
    max: Optional[float] = None

    @model_validator(mode="before")
    @classmethod
    def _from_number(cls, value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return {"min": value, "max": value}
        return value

    @model_validator(mode="after")
    def _can_hold(self) -> Limit:
        if self.min is None and self.max is None:
            raise ValueError("a limit needs min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max}): no value can hold")
        return self

    def holds(self, value: float) -> bool:
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)

    def describe(self) -> str:
        if self.min == self.max:
            return f"== {self.min:g}"
        parts = [f">= {self.min:g}" if self.min is not None else "", f"<= {self.max:g}" if self.max is not None else ""]
        return " and ".join(p for p in parts if p)


class _FaultBase(_Strict):
    rank: Optional[int] = Field(default=None, ge=0)
    """The target rank; None lets the seeded plan choose (random only)."""
    at_step: Optional[int] = Field(default=None, ge=1)
    """Fire just before this step (1-based) computes."""
    after_s: Optional[float] = Field(default=None, ge=0)
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


Fault = Annotated[Union[RankKilled, RankHung, RandomFault], Field(discriminator="type")]


class FTLauncherOptions(_Strict):
    """ft_launcher's --ft-* options (NVRx FaultToleranceConfig names), and its restart policy."""

    initial_rank_heartbeat_timeout: Optional[float] = Field(default=30.0, gt=0)
    rank_heartbeat_timeout: Optional[float] = Field(default=5.0, gt=0)
    rank_section_timeouts: Optional[dict[str, float]] = None
    rank_out_of_section_timeout: Optional[float] = Field(default=None, gt=0)
    workload_check_interval: float = Field(default=1.0, gt=0)
    term_timeout: float = Field(default=15.0, gt=0)
    """Seconds the launcher waits after SIGTERM before SIGKILL when it stops workers (NVRx tests use 15)."""


class Baseline(_Strict):
    """Compare with a fault-free run of the same config: exact bits, or losses within a tolerance."""

    tolerance: float = Field(ge=0)


class Expect(_Strict):
    """What a recovered run must show. Every field is optional; each given one is a verdict."""

    exit_code: Optional[int] = None
    restarts: Optional[Limit] = None
    resumed_from_step: Optional[int] = Field(default=None, ge=0)
    completed_steps: Optional[int] = Field(default=None, ge=0)
    lost_steps: Optional[Limit] = None
    time_to_detect_s: Optional[Limit] = None
    time_to_recover_s: Optional[Limit] = None
    goodput: Optional[Limit] = None
    baseline: Optional[Union[Literal["exact"], Baseline]] = None


class Scenario(_Strict):
    schema_version: Literal[1] = 1
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str
    world_size: int = Field(ge=1, le=64)
    launcher: Literal["ft_launcher", "torchrun"] = "ft_launcher"
    recipe: str = "tiny_cpu"
    trainer: dict[str, Union[bool, int, float, str, None]] = Field(default_factory=dict)
    """Dotted trainer overrides, as on the trainer's command line."""
    ft: FTLauncherOptions = Field(default_factory=FTLauncherOptions)
    max_restarts: int = Field(default=3, ge=0)
    deadline_s: float = Field(default=120.0, gt=0)
    seed: int = Field(default=0, ge=0)
    faults: list[Fault] = Field(default_factory=list)
    expect: Expect = Field(default_factory=Expect)

    def trainer_overrides(self, run_dir: str | Path = "RUN_DIR") -> list[str]:
        """The trainer's command-line overrides: the scenario's, then the run folder's own paths."""
        own = {"checkpoint.save": f"{run_dir}/checkpoints", "logger.run_dir": str(run_dir)}
        return [f"{k}={_scalar(v)}" for k, v in {**self.trainer, **own}.items()]

    def trainer_config(self, run_dir: str | Path = "RUN_DIR") -> TrainerConfig:
        """The trainer config this scenario runs, validated by the trainer itself."""
        return load_config(self.recipe, None, self.trainer_overrides(run_dir))

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        try:
            cfg = self.trainer_config()
        except ConfigError as e:
            raise ValueError(f"trainer: {e}") from None
        iters = cfg.train.train_iters
        for i, fault in enumerate(self.faults):
            if fault.rank is not None and fault.rank >= self.world_size:
                raise ValueError(f"faults[{i}].rank: {fault.rank} is outside the world (world_size {self.world_size})")
            if fault.at_step is not None and fault.at_step > iters:
                raise ValueError(f"faults[{i}].at_step: {fault.at_step} is past train.train_iters ({iters})")
            if fault.attempt > self.max_restarts:
                raise ValueError(f"faults[{i}].attempt: {fault.attempt} is past max_restarts ({self.max_restarts})")
            if fault.type != "random" and fault.rank is None:
                raise ValueError(f"faults[{i}].rank: required for {fault.type} (only random may leave it out)")
        self._check_expect(cfg)
        return self

    def _check_expect(self, cfg: TrainerConfig) -> None:
        e, iters = self.expect, cfg.train.train_iters
        if e.completed_steps is not None and e.completed_steps > iters:
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
        if e.restarts is not None and e.restarts.min is not None and e.restarts.min > self.max_restarts:
            raise ValueError(f"expect.restarts: min {e.restarts.min:g} exceeds max_restarts ({self.max_restarts})")
        if e.lost_steps is not None and e.lost_steps.min is not None and e.lost_steps.min > iters:
            raise ValueError(f"expect.lost_steps: min {e.lost_steps.min:g} exceeds train.train_iters ({iters})")
        for name in ("time_to_detect_s", "time_to_recover_s"):
            limit = getattr(e, name)
            if limit is not None and limit.min is not None and limit.min > self.deadline_s:
                raise ValueError(f"expect.{name}: min {limit.min:g} is beyond deadline_s ({self.deadline_s:g})")
        if e.goodput is not None and ((e.goodput.min or 0) > 1 or (e.goodput.min or 0) < 0):
            raise ValueError("expect.goodput: must lie within [0, 1]")


def _scalar(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _describe(error: dict[str, Any]) -> str:
    loc = ".".join(str(p) for p in error["loc"] if not str(p).startswith(("function-after", "function-before")))
    # Union branches add the branch name to the location: keep the path a user wrote.
    for branch in ("rank_killed", "rank_hung", "random", "Baseline", "literal['exact']", "float", "int", "bool", "str"):
        loc = loc.replace(f".{branch}", "")
    msg = error["msg"].removeprefix("Value error, ")
    return f"{loc}: {msg}" if loc else msg


def parse_scenario(data: Any, source: str) -> Scenario:
    """Validate an already-loaded mapping; errors name `source` and the field."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario must be a mapping, got {type(data).__name__}")
    if "schema_version" in data and data["schema_version"] != SCHEMA_VERSION:
        raise ScenarioError(f"{source}: schema_version: {data['schema_version']!r} is not supported (use {SCHEMA_VERSION})")
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(f"{source}: {_describe(e.errors()[0])}") from None


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate one scenario file (YAML, safe loader)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ScenarioError(f"{p}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"{p}: not a text file") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ScenarioError(f"{p}: not valid YAML ({str(e).splitlines()[0]})") from None
    return parse_scenario(data, str(p))


def scenario_files(folder: str | Path) -> list[Path]:
    return sorted(Path(folder).glob("*.yaml"))
