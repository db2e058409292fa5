"""The scenario schema and its loader: what to break and what recovery to expect.

Strict by design: an unknown key, a wrong type, a rank outside the world, a step past train_iters or a
limit that cannot hold is a :class:`ScenarioError` raised before anything is launched. Its message is one
line, ``<file>: <field path>: <problem>``, with the path as the author wrote it (``faults[0].rank``).
docs/scenarios.md documents every field.
"""

from __future__ import annotations

import math
import random
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BeforeValidator, Field, PrivateAttr, ValidationError, field_validator, model_validator

from chaos.schema.base import Strict, show
from chaos.schema.expect import HARNESS_VERDICTS, Expect, KnownFailure
from chaos.schema.faults import Fault
from chaos.schema.ft_options import FTLauncherOptions
from chaos.schema.messages import describe, yaml_problem
from chaos.schema.plan import PlannedFault, Side
from runlog.layout import RunFolder
from trainer.config import ConfigError, TrainerConfig
from trainer.config_loader import load_config
from trainer.recipes import recipe_values


class ScenarioError(ValueError):
    """A scenario file is wrong; the message is one line: ``<file>: <field path>: <problem>``."""


SCHEMA_VERSION = 1
RUNNER_KEYS = ("checkpoint.save", "logger.run_dir", "fault_injection.component", "fault_injection.plan")
"""Trainer settings the runner sets (paths into the run folder, the injector that fires the plan); a scenario
may not set them: it never names code to run."""


def _override_value(value: Any) -> Any:
    finite = isinstance(value, float) and math.isfinite(value)
    if value is None or finite or isinstance(value, (bool, int, str)):
        return value
    raise ValueError(f"must be a number, a string, true, false or null, got {show(value)}")


OverrideValue = Annotated[bool | int | float | str | None, BeforeValidator(_override_value)]


class Scenario(Strict):
    schema_version: Literal[1] = 1
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str
    world_size: int = Field(ge=1, le=64)
    nodes: int = Field(default=1, ge=1, le=16)
    """Launcher agents, one per simulated node (node0..), meeting in one c10d rendezvous (chaos/supervise/nodes.py)."""
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
    adapter: Literal["megatron"] | None = None
    """For `command`: read its output with this adapter (chaos/adapters): steps, checkpoints, FT timeouts,
    faults, rerun decisions and exits become observed events, so every metric applies."""
    needs: list[Literal["megatron-core", "megatron-bridge", "transformer-engine"]] = Field(default_factory=list)
    """Packages the run needs; where one is not installed the scenario is skipped with that reason."""
    known_failure: KnownFailure | None = None
    """The recovery fails today for a reason outside the harness (expect.py, KnownFailure)."""
    faults: list[Fault] = Field(default_factory=list)
    expect: Expect = Field(default_factory=Expect)

    def trainer_overrides(self, run_dir: str | Path = "RUN_DIR") -> list[str]:
        """The trainer's command-line overrides: the scenario's, then the run folder's own paths.

        Values are written as YAML scalars, so the trainer reads back exactly the scenario's values.
        """
        own = {"checkpoint.save": str(RunFolder(Path(run_dir)).checkpoints), "logger.run_dir": str(run_dir)}
        return [f"{k}={_yaml_scalar(v)}" for k, v in {**self.trainer, **own}.items()]

    _config: TrainerConfig = PrivateAttr()

    @property
    def config(self) -> TrainerConfig:
        """The trainer config this scenario runs, built once when the scenario is validated (by the trainer's
        own loader: its recipe, then its overrides); its paths are placeholders the runner's overrides fill."""
        return self._config

    def replace(self, **changes: Any) -> Scenario:
        """This scenario with `changes`, validated again (so its trainer config is that of the changes)."""
        return type(self).model_validate({**self.model_dump(), **changes})

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
            self._config = load_config(self.recipe, None, self.trainer_overrides())
        except (ConfigError, ArithmeticError) as e:
            # ArithmeticError: values trainer.config does not catch itself (num_attention_heads 0, an integer
            # too large for a float field); still a one-line error, never a traceback.
            raise ValueError(f"trainer: {e}") from None
        self._check_faults()
        self._check_expect()
        self._check_command()
        self._check_nodes()
        if self.relaunch_env and not self.relaunch:
            raise ValueError("relaunch_env: set relaunch: true as well (it is the relaunch's environment)")
        return self

    @property
    def runs_alone(self) -> bool:
        """Its verdicts rest on how fast its ranks run against each other (straggler detection): another run
        sharing the machine's cores or GPUs would skew them, so a parallel test session runs it alone."""
        return self.config.nvrx_straggler.enabled

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
            if fault.planned.side is not Side.NODE:
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
            for key in ("step_pattern", "adapter"):
                if getattr(self, key) is not None:
                    raise ValueError(f"{key}: only for a `command` (the trainer writes its own events)")
            return
        if self.step_pattern is not None and self.adapter is not None:
            raise ValueError("adapter: give it or step_pattern, not both (the adapter reads the steps itself)")
        if self.trainer:
            raise ValueError("trainer: a `command` scenario runs its own command; leave trainer overrides out")
        if self.expect.baseline is not None:
            raise ValueError("expect.baseline: needs this project's trainer (a `command` writes no final weights)")
        for i, fault in enumerate(self.faults):
            if fault.planned.side is not Side.RUNNER:
                raise ValueError(f"faults[{i}].type: {fault.type} fires inside this project's trainer; a `command` takes signal faults only")
        if self.step_pattern is not None:
            try:
                pattern = re.compile(self.step_pattern)
            except re.error as e:
                raise ValueError(f"step_pattern: not a regular expression ({e})") from None
            if "step" not in pattern.groupindex:
                raise ValueError("step_pattern: needs a named group (?P<step>\\d+)")
        elif self.adapter is None and any(f.at_step is not None for f in self.faults):
            raise ValueError("step_pattern: required when a fault of a `command` fires at_step (or an adapter)")

    def last_attempt(self) -> tuple[int | None, str]:
        """The highest attempt the run can reach (None: no bound), and why.

        Each launch has max_restarts + 1 launcher rounds, a relaunch is one more launch, and under in-process
        restart each round has up to max_iterations attempts (NVRx's RetryController stops the Wrapper at
        iteration max_iterations; no bound when null).
        """
        rounds = (self.max_restarts + 1) * (2 if self.relaunch else 1)
        why = f"max_restarts {self.max_restarts}" + (", relaunch" if self.relaunch else "")
        inprocess = self.config.inprocess_restart
        if not inprocess.enabled:
            return rounds - 1, why
        per_round = inprocess.max_iterations
        if per_round is None:
            return None, why + ", in-process restarts unbounded"
        return rounds * per_round - 1, why + f", inprocess_restart.max_iterations {per_round}"

    def _check_faults(self) -> None:
        cfg = self.config
        iters, world = cfg.train.train_iters, self.world_size
        sim_rank = cfg.ft.simulated_fault_rank
        last, why = self.last_attempt()
        if sim_rank is not None and not 0 <= sim_rank < world:
            raise ValueError(f"trainer.ft.simulated_fault_rank: {sim_rank} is outside the world (world_size {world})")
        for i, fault in enumerate(self.faults):
            if fault.rank is not None and fault.rank >= world:
                raise ValueError(f"faults[{i}].rank: {fault.rank} is outside the world (world_size {world})")
            for r in getattr(fault, "ranks", None) or ():
                if r >= world:
                    raise ValueError(f"faults[{i}].ranks: {r} is outside the world (world_size {world})")
            if fault.type != "random" and fault.rank is None and fault.planned.side is Side.RANK:
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

    def _check_expect(self) -> None:
        cfg = self.config
        e, iters = self.expect, cfg.train.train_iters
        if e.completed_steps is not None and self.command is None and e.completed_steps > iters:
            raise ValueError(f"expect.completed_steps: {e.completed_steps} is past train.train_iters ({iters})")
        if e.resumed_from_step is not None and self.command is None:
            interval = cfg.checkpoint.save_interval
            if e.resumed_from_step > 0 and not interval:
                raise ValueError("expect.resumed_from_step: the trainer saves no checkpoints (set checkpoint.save_interval)")
            if e.resumed_from_step > iters or (interval and e.resumed_from_step % interval):
                raise ValueError(
                    f"expect.resumed_from_step: {e.resumed_from_step} is not a checkpoint step "
                    f"(save_interval {interval}, train_iters {iters})"
                )
        last, why = self.last_attempt()
        if e.restarts is not None and e.restarts.min is not None and last is not None and e.restarts.min > last:
            raise ValueError(f"expect.restarts: min {e.restarts.min:g} is past the run's last attempt ({last}: {why})")
        if e.lost_steps is not None and e.lost_steps.min is not None and self.command is None and e.lost_steps.min > iters:
            raise ValueError(f"expect.lost_steps: min {e.lost_steps.min:g} exceeds train.train_iters ({iters})")
        for name in ("time_to_detect_s", "time_to_recover_s"):
            limit = getattr(e, name)
            if limit is not None and limit.min is not None and limit.min > self.deadline_s:
                raise ValueError(f"expect.{name}: min {limit.min:g} is beyond deadline_s ({self.deadline_s:g})")
        bounds = (e.goodput.min, e.goodput.max) if e.goodput is not None else ()
        if any(v is not None and not 0 <= v <= 1 for v in bounds):
            raise ValueError("expect.goodput: min and max must lie within [0, 1]")
        known = self.known_failure
        for i, name in enumerate(known.verdicts if known else ()):
            if name not in HARNESS_VERDICTS and getattr(e, name, None) is None:
                raise ValueError(f"known_failure.verdicts[{i}]: {name!r} is not an expectation this scenario sets")


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


def parse_scenario(data: Any, source: str) -> Scenario:
    """Validate already-loaded data; every error is one line that starts with `source`."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario must be a mapping of fields, got {show(data)}")
    version = data.get("schema_version", SCHEMA_VERSION)
    if type(version) is not int or version != SCHEMA_VERSION:
        raise ScenarioError(f"{source}: schema_version: {show(version)} is not supported (use {SCHEMA_VERSION})")
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(f"{source}: {describe(e.errors()[0])}") from None


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
        raise ScenarioError(f"{p}: not valid YAML: {yaml_problem(e)}") from None
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


def plan_faults(scenario: Scenario, seed: int) -> list[PlannedFault]:
    """Resolve every random choice of the scenario's faults from `seed`, fault by fault, in order."""
    rng = random.Random(seed)
    return [fault.plan(f"f{i}", rng, scenario.world_size) for i, fault in enumerate(scenario.faults)]


def scenario_files(folder: str | Path) -> list[Path]:
    """The scenario files of a folder (``*.yaml``), sorted by name."""
    return sorted(Path(folder).glob("*.yaml"))
