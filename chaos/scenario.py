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

from trainer.config import ConfigError, TrainerConfig, load_config
from trainer.recipes import recipe_values

SCHEMA_VERSION = 1
RUNNER_KEYS = ("checkpoint.save", "logger.run_dir")
"""Trainer settings the runner points into the run folder; a scenario may not set them."""


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


Fault = Annotated[RankHung | RankKilled | RandomFault, Field(discriminator="type")]


class FTLauncherOptions(_Strict):
    """ft_launcher's --ft-* options (NVRx FaultToleranceConfig names), and its restart policy."""

    initial_rank_heartbeat_timeout: float | None = Field(default=30.0, gt=0)
    rank_heartbeat_timeout: float | None = Field(default=5.0, gt=0)
    rank_section_timeouts: dict[str, Annotated[float, Field(gt=0)]] | None = None
    rank_out_of_section_timeout: float | None = Field(default=None, gt=0)
    workload_check_interval: float = Field(default=1.0, gt=0)
    term_timeout: float = Field(default=15.0, gt=0)
    """Seconds the launcher waits after SIGTERM before SIGKILL when it stops workers (NVRx tests use 15)."""


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
    goodput: Limit | None = None
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
    launcher: Literal["ft_launcher", "torchrun"] = "ft_launcher"
    recipe: str = "tiny_cpu"
    trainer: dict[str, OverrideValue] = Field(default_factory=dict)
    """Dotted trainer overrides, as on the trainer's command line."""
    ft: FTLauncherOptions = Field(default_factory=FTLauncherOptions)
    max_restarts: int = Field(default=3, ge=0)
    deadline_s: float = Field(default=120.0, gt=0)
    seed: int = Field(default=0, ge=0)
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
        return self

    def _check_faults(self, cfg: TrainerConfig) -> None:
        iters, world = cfg.train.train_iters, self.world_size
        sim_rank = cfg.ft.simulated_fault_rank
        if sim_rank is not None and not 0 <= sim_rank < world:
            raise ValueError(f"trainer.ft.simulated_fault_rank: {sim_rank} is outside the world (world_size {world})")
        for i, fault in enumerate(self.faults):
            if fault.rank is not None and fault.rank >= world:
                raise ValueError(f"faults[{i}].rank: {fault.rank} is outside the world (world_size {world})")
            if fault.type != "random" and fault.rank is None:
                raise ValueError(f"faults[{i}].rank: required for {fault.type} (only random may leave it out)")
            if fault.at_step is not None and fault.at_step > iters:
                raise ValueError(f"faults[{i}].at_step: {fault.at_step} is past train.train_iters ({iters})")
            if fault.after_s is not None and fault.after_s >= self.deadline_s:
                raise ValueError(f"faults[{i}].after_s: {fault.after_s:g} is past deadline_s ({self.deadline_s:g})")
            if fault.attempt > self.max_restarts:
                raise ValueError(f"faults[{i}].attempt: {fault.attempt} is past max_restarts ({self.max_restarts})")

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
        bounds = (e.goodput.min, e.goodput.max) if e.goodput is not None else ()
        if any(v is not None and not 0 <= v <= 1 for v in bounds):
            raise ValueError("expect.goodput: min and max must lie within [0, 1]")


def _yaml_scalar(value: Any) -> str:
    """`value` as YAML that reads back as the same value: the string '5' stays a string, 1e-05 a float."""
    text = yaml.safe_dump(value, width=math.inf)  # escapes non-ASCII: a raw NEL would read back as a space
    return text.removesuffix("\n...\n").removesuffix("\n")


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
