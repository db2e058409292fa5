"""The scenario schema and its loader: what to break and what recovery to expect.

Strict by design: an unknown key, a wrong type, a rank outside the world, a step past train_iters or a
limit that cannot hold is a :class:`ScenarioError` raised before anything is launched. It holds every
problem the file has, one line each, ``<file>: <field path>: <problem>``, with the path as the author wrote
it (``faults[0].rank``). docs/scenarios.md documents every field.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from chaos.errors import BadInput
from chaos.faults.disk import schema as disk
from chaos.faults.memory import schema as memory
from chaos.faults.network import schema as network
from chaos.faults.nic import schema as nic
from chaos.faults.node_health import schema as node_health
from chaos.faults.plan import PlannedFault, Side
from chaos.faults.registry import Fault
from chaos.faults.slurm.schema import SlurmRequeue
from chaos.faults.spec import FaultSpec
from chaos.schema import command as cmd
from chaos.schema.expect import HARNESS_VERDICTS, Expect, KnownFailure
from chaos.schema.ft_options import FTLauncherOptions
from chaos.schema.overrides import RUNNER_KEYS, ExploreOptions, OverrideValue, settings_problems
from chaos.schema.plugins import Plugins, apply_plugins, preemption_fault
from chaos.schema.slurm_options import SlurmOptions, slurm_problems
from chaos.strict import Strict, rules_broken
from runlog.layout import RunFolder
from trainer.config import TrainerConfig
from trainer.config_base import ConfigError
from trainer.config_loader import load_config
from trainer.recipes import recipe_values


class ScenarioError(BadInput):
    """A scenario file is wrong: one line per problem, ``<file>: <field path>: <problem>``."""


SCHEMA_VERSION = 1
UNCHECKED = "unchecked"
"""The validation context's key for the fields left at their defaults because they are broken (parse_scenario)."""
RULE_INPUTS = frozenset({"recipe", "trainer", "world_size", "nodes", "procs_per_node", "command", "step_pattern"})
"""Fields most cross-field rules read: while one is broken, the rules wait until it is fixed."""


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
    requires: Literal["any", "cpu", "gpu", "slurm"] = "any"
    """Where the scenario applies: 'gpu' ones are skipped (with the reason) on CPU machines, 'cpu' ones on GPU
    runs, 'slurm' ones by the local runner (they run with `run --slurm`)."""
    recipe: str = "tiny_cpu"
    trainer: dict[str, OverrideValue] = Field(default_factory=dict)
    """Dotted trainer overrides, as on the trainer's command line."""
    ft: FTLauncherOptions = Field(default_factory=FTLauncherOptions)
    slurm: SlurmOptions = Field(default_factory=SlurmOptions)
    max_restarts: int = Field(default=3, ge=0)
    deadline_s: float = Field(default=120.0, gt=0)
    seed: int = Field(default=0, ge=0)
    relaunch: bool = False
    """After the launcher exits, launch the job once more in the same run folder (a requeued preempted job)."""
    job_retries: int = Field(default=0, ge=0)
    """After a launch that failed (a non-zero exit), launch the job again in the same run folder, up to this
    many times: NeMo-Run's executor.retries (FaultTolerancePlugin.num_job_retries_on_failure)."""
    plugins: Plugins = Field(default_factory=Plugins)
    """NeMo-Run's FaultTolerancePlugin and PreemptionPlugin, as the card writes them (chaos/schema/plugins.py)."""
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
    flight_recorder: bool = False  # arm torch's Flight Recorder in the ranks (chaos/adapters/flight_recorder.py)
    known_failure: KnownFailure | None = None
    """The recovery fails today for a reason outside the harness (expect.py, KnownFailure)."""
    faults: list[Fault] = Field(default_factory=list)
    expect: Expect = Field(default_factory=Expect)
    explore: ExploreOptions | None = None

    def trainer_overrides(self, run_dir: str | Path = "RUN_DIR") -> list[str]:
        """The trainer's command-line overrides: the scenario's, then the run folder's own paths. Values are
        written as YAML scalars, so the trainer reads back exactly the scenario's values."""
        folder = RunFolder(Path(run_dir))
        own = {
            "checkpoint.save": str(folder.checkpoints), "checkpoint.non_persistent_local_ckpt_dir": str(folder.local_checkpoints),
            "logger.run_dir": str(run_dir),
        }
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

    @model_validator(mode="before")
    @classmethod
    def _plugins(cls, data: Any) -> Any:
        return apply_plugins(data) if isinstance(data, dict) else data

    @field_validator("recipe")
    @classmethod
    def _known_recipe(cls, recipe: str) -> str:
        recipe_values(recipe)
        return recipe

    _unchecked: frozenset[str] = PrivateAttr(default=frozenset())
    @field_validator("command")
    @classmethod
    def _command_files(cls, command: list[str] | None, info: ValidationInfo) -> list[str] | None:
        """Loaded from a file (the loader's context names its folder): the command's files, resolved there."""
        folder = (info.context or {}).get("folder")
        return command if command is None or folder is None else cmd.resolve(command, folder)

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> Scenario:
        """Every cross-field rule, each problem one error; the rules that read a field in the context's
        UNCHECKED (broken, left at its default) are not applied."""
        self._unchecked = frozenset((info.context or {}).get(UNCHECKED, ()))
        problems = [f"trainer.{key}: set by the runner (inside the run folder); leave it out" for key in RUNNER_KEYS if key in self.trainer]
        if not problems:
            problems += self._config_problems()
        if not problems:
            drawn = settings_problems(self.explore, self.command is not None, self._with_setting)
            problems += [*self._check_faults(), *self._check_expect(), *drawn]
        slurm = slurm_problems(self.requires == "slurm", self.faults, self.command is not None or self.relaunch, self.slurm, self.expect)
        problems += [*(slurm if self.checked("requires") else ()), *self._check_command(), *self._check_nodes()]
        if self.relaunch_env and not self.relaunch:
            problems.append("relaunch_env: set relaunch: true as well (it is the relaunch's environment)")
        pre = self.plugins.preemption
        if pre is not None and self.checked("deadline_s") and pre.preempt_time >= self.deadline_s:
            problems.append(f"plugins.preemption.preempt_time: {pre.preempt_time:g} s is not before deadline_s ({self.deadline_s:g}), the job's time limit")
        if problems:
            raise rules_broken(problems)
        return self

    def _config_problems(self) -> list[str]:
        """Build the trainer config (the trainer's own loader), and apply the checks the trainer makes of it
        at start for this world; the problems, if it cannot run."""
        try:
            self._config = load_config(self.recipe, None, self.trainer_overrides())
            self._config.train.global_batch(self.world_size)
        except ConfigError as e:
            return [f"trainer: {problem}" for problem in e.problems]
        except ArithmeticError as e:
            # Values trainer.config does not catch itself (num_attention_heads 0, an integer too large for a
            # float field); still a one-line error, never a traceback.
            return [f"trainer: {e}"]
        return []

    def _with_setting(self, key: str, value: Any) -> None:
        """Build the config with one more override (an explore draw); ConfigError when this world cannot run it."""
        drawn = self.model_copy(update={"trainer": {**self.trainer, key: value}})
        load_config(self.recipe, None, drawn.trainer_overrides()).train.global_batch(self.world_size)

    def checked(self, *fields: str) -> bool:
        """Whether none of `fields` is broken (see UNCHECKED): a rule that reads one waits for it."""
        return not self._unchecked.intersection(fields)

    @property
    def runs_alone(self) -> bool:
        """Its verdicts rest on how fast its ranks run against each other (straggler detection): another run
        sharing the machine's cores or GPUs would skew them, so a parallel test session runs it alone."""
        return self.config.nvrx_straggler.enabled

    @property
    def node_size(self) -> int:
        """Ranks per node (procs_per_node, or world_size / nodes)."""
        return self.procs_per_node or self.world_size // self.nodes

    def _check_nodes(self) -> Iterator[str]:
        """A multi-node scenario: a world that splits evenly over its nodes, and node faults that name one."""
        if self.nodes * self.node_size != self.world_size:
            yield f"world_size: {self.world_size} is not nodes ({self.nodes}) x procs_per_node ({self.node_size})"
        if self.nodes > 1 and (self.command is not None or self.relaunch):
            yield "nodes: a multi-node scenario runs this project's trainer, without command or relaunch"
        if self.spares and self.nodes == 1:
            yield "spares: hot spares join a multi-node rendezvous; set nodes to 2 or more"
        killed: set[int] = set()
        for i, fault in enumerate(self.faults):
            if fault.planned.side is not Side.NODE:
                continue
            if fault.rank is not None:
                yield f"faults[{i}].rank: a {fault.type} fault names a node, not a rank"
            if fault.node >= self.nodes:
                yield f"faults[{i}].node: {fault.node} is not a node of the run (nodes {self.nodes})"
            if fault.type == "node_rejoin" and fault.node not in killed:
                yield f"faults[{i}].node: node_rejoin replaces a node an earlier node_killed fault lost"
            if fault.type == "node_killed":
                killed.add(fault.node)

    def _check_command(self) -> Iterator[str]:
        if self.command is None:
            for key in ("step_pattern", "adapter"):
                if getattr(self, key) is not None:
                    yield f"{key}: only for a `command` (the trainer writes its own events)"
            return
        if self.step_pattern is not None and self.adapter is not None:
            yield "adapter: give it or step_pattern, not both (the adapter reads the steps itself)"
        if self.trainer:
            yield "trainer: a `command` scenario runs its own command; leave trainer overrides out"
        if self.expect.baseline is not None:
            yield "expect.baseline: needs this project's trainer (a `command` writes no final weights)"
        for i, fault in enumerate(self.faults):
            if self.planned(fault).side is not Side.RUNNER and (problem := cmd.rank_fault_problem(fault.type, fault.seam, self.command)):
                yield f"faults[{i}].type: {problem}"
        yield from cmd.ft_cfg_problems(self.command, self.launcher, self.ft.detection_set())
        if self.step_pattern is not None:
            try:
                pattern = re.compile(self.step_pattern)
            except re.error as e:
                yield f"step_pattern: not a regular expression ({e})"
                return
            if "step" not in pattern.groupindex:
                yield "step_pattern: needs a named group (?P<step>\\d+)"
        elif self.adapter is None and any(f.at_step is not None for f in self.faults):
            yield "step_pattern: required when a fault of a `command` fires at_step (or an adapter)"
        yield from self._check_command_expect()

    def _check_command_expect(self) -> Iterator[str]:
        """What a command's steps can show: they come from its output lines (step_pattern, or an adapter), and
        none is past the last step the scenario expects it to reach."""
        e, steps = self.expect, ("completed_steps", "resumed_from_step", "lost_steps")
        named = [name for name in steps if getattr(e, name) is not None]
        if named and self.step_pattern is None and self.adapter is None:
            yield f"expect.{named[0]}: a `command`'s steps are read from its output; set step_pattern (or an adapter)"
        if e.completed_steps is None:
            return
        if e.resumed_from_step is not None and e.resumed_from_step > e.completed_steps:
            yield f"expect.resumed_from_step: {e.resumed_from_step} is past expect.completed_steps ({e.completed_steps})"
        if e.lost_steps is not None and e.lost_steps.min is not None and e.lost_steps.min > e.completed_steps:
            yield f"expect.lost_steps: min {e.lost_steps.min:g} exceeds expect.completed_steps ({e.completed_steps})"

    def last_attempt(self) -> tuple[int | None, str]:
        """The highest attempt the run can reach (None: no bound), and why.

        Each launch has max_restarts + 1 launcher rounds, a relaunch is one more launch, so is each Slurm requeue
        (a `slurm_requeue` fault, each of `slurm.job_retries`), and under in-process restart each round has up to
        max_iterations attempts (NVRx's RetryController stops the Wrapper at iteration max_iterations; no bound
        when null).
        """
        requeues = self.slurm.job_retries + sum(isinstance(f, SlurmRequeue) for f in self.faults)
        rounds = (self.max_restarts + 1) * (1 + self.relaunch + self.job_retries + requeues)
        why = f"max_restarts {self.max_restarts}" + (", relaunch" if self.relaunch else "")
        why += f", job_retries {self.job_retries}" if self.job_retries else ""
        why += f", {requeues} Slurm requeue(s)" if requeues else ""
        inprocess = self.config.inprocess_restart
        if not inprocess.enabled:
            return rounds - 1, why
        per_round = inprocess.max_iterations
        if per_round is None:
            return None, why + ", in-process restarts unbounded"
        return rounds * per_round - 1, why + f", inprocess_restart.max_iterations {per_round}"

    def _checked_last_attempt(self) -> tuple[int | None, str]:
        """last_attempt(), or no bound while max_restarts or relaunch is broken."""
        return self.last_attempt() if self.checked("max_restarts", "relaunch") else (None, "")

    def planned(self, fault: FaultSpec) -> PlannedFault:
        """`fault` as planned here (seed 0): who fires it (inside our trainer, or outside a `command`), at which rank."""
        return fault.plan("f", random.Random(0), self.world_size, command=self.command is not None)

    def _check_faults(self) -> Iterator[str]:
        cfg = self.config
        iters, world = cfg.train.train_iters, self.world_size
        sim_rank = cfg.ft.simulated_fault_rank
        last, why = self._checked_last_attempt()
        deadline = self.checked("deadline_s")
        if sim_rank is not None and not 0 <= sim_rank < world:
            yield f"trainer.ft.simulated_fault_rank: {sim_rank} is outside the world (world_size {world})"
        kinds = {fault.type for fault in self.faults}
        for i, fault in enumerate(self.faults):
            if fault.rank is not None and fault.rank >= world:
                yield f"faults[{i}].rank: {fault.rank} is outside the world (world_size {world})"
            for r in getattr(fault, "ranks", None) or ():
                if r >= world:
                    yield f"faults[{i}].ranks: {r} is outside the world (world_size {world})"
            planned = self.planned(fault)
            if planned.side is Side.RANK and planned.rank is None:
                yield f"faults[{i}].rank: required for {fault.type} (the rank it strikes)"
            if fault.requires is not None and self.requires != fault.requires:
                yield f"faults[{i}].type: {fault.type} needs requires: {fault.requires} (the scenario says {self.requires})"
            if fault.at_step is not None and self.command is None and fault.at_step > iters:
                yield f"faults[{i}].at_step: {fault.at_step} is past train.train_iters ({iters})"
            if fault.type == "fault_during_checkpoint" and fault.at_step:
                yield from self._save_step_problems(f"faults[{i}].at_step", fault.at_step, local=fault.during == "local_save")
            if isinstance(fault, disk.DiskFull) and self.nodes > 1:
                yield f"faults[{i}].type: disk_full fills the run's one disk; a multi-node run has one per node"
            if isinstance(fault, disk.DiskFull | disk.StorageStall):
                if self.command is None and fault.at_step:
                    yield from self._save_step_problems(f"faults[{i}].at_step", fault.at_step, local=False)
                yield from (f"faults[{i}].{p}" for p in disk.scenario_problems(fault, cfg, self.command is not None, self.deadline_s, kinds))
            if isinstance(fault, network.NetworkPartition | network.NetworkDegraded):
                yield from (f"faults[{i}].{p}" for p in network.scenario_problems(fault, self.nodes, self.deadline_s if deadline else None))
            if isinstance(fault, memory.HostOom):
                yield from (f"faults[{i}].{p}" for p in memory.scenario_problems(self.command is not None))
            if isinstance(fault, nic.NicLinkDown):
                count = sum(isinstance(f, nic.NicLinkDown) for f in self.faults)
                yield from (f"faults[{i}].{p}" for p in nic.scenario_problems(
                    self.launcher, self.nodes, self.requires == "slurm", count, self.ft.enable_nic_healthcheck, self.ft.link_state_path_template))
            if isinstance(fault, node_health.NodeUnhealthy):
                count = sum(isinstance(f, node_health.NodeUnhealthy) for f in self.faults)
                yield from (f"faults[{i}].{p}" for p in node_health.scenario_problems(
                    self.launcher, self.nodes, self.requires == "slurm", count))
            if deadline and fault.after_s is not None and fault.after_s >= self.deadline_s:
                yield f"faults[{i}].after_s: {fault.after_s:g} is past deadline_s ({self.deadline_s:g})"
            if last is not None and fault.last_attempt > last:
                yield f"faults[{i}].attempt: {fault.last_attempt} is past the run's last attempt ({last}: {why})"

    def _check_expect(self) -> Iterator[str]:
        cfg = self.config
        e, iters = self.expect, cfg.train.train_iters
        if e.completed_steps is not None and self.command is None and e.completed_steps > iters:
            yield f"expect.completed_steps: {e.completed_steps} is past train.train_iters ({iters})"
        if e.resumed_from_step and self.command is None:
            c = cfg.checkpoint
            local = c.local and not (c.save_interval and e.resumed_from_step % c.save_interval == 0)
            yield from self._save_step_problems("expect.resumed_from_step", e.resumed_from_step, local=local)
        last, why = self._checked_last_attempt()
        if e.restarts is not None and e.restarts.min is not None and last is not None and e.restarts.min > last:
            yield f"expect.restarts: min {e.restarts.min:g} is past the run's last attempt ({last}: {why})"
        if e.lost_steps is not None and e.lost_steps.min is not None and self.command is None and e.lost_steps.min > iters:
            yield f"expect.lost_steps: min {e.lost_steps.min:g} exceeds train.train_iters ({iters})"
        for name in ("time_to_detect_s", "time_to_recover_s"):
            limit = getattr(e, name)
            if self.checked("deadline_s") and limit is not None and limit.min is not None and limit.min > self.deadline_s:
                yield f"expect.{name}: min {limit.min:g} is beyond deadline_s ({self.deadline_s:g})"
        bounds = (e.goodput.min, e.goodput.max) if e.goodput is not None else ()
        if any(v is not None and not 0 <= v <= 1 for v in bounds):
            yield "expect.goodput: min and max must lie within [0, 1]"
        known = self.known_failure
        for field in ("verdicts", "may_also_fail"):
            for i, name in enumerate(getattr(known, field) if known else ()):
                if name not in HARNESS_VERDICTS and getattr(e, name, None) is None:
                    yield f"known_failure.{field}[{i}]: {name!r} is not an expectation this scenario sets"

    def _save_step_problems(self, where: str, step: int, local: bool) -> Iterator[str]:
        """Unless `step` is one the trainer saves a checkpoint of (a persistent one, or with `local` an NVRx
        local one), why not."""
        c, iters = self.config.checkpoint, self.config.train.train_iters
        persistent = bool(c.save_interval) and step % c.save_interval == 0
        if local and not c.local:
            yield f"{where}: the trainer saves no local checkpoints (set checkpoint.non_persistent_ckpt_type: local)"
        elif local and (step % c.non_persistent_save_interval or persistent):
            yield (f"{where}: {step} is not a local checkpoint step (non_persistent_save_interval "
                   f"{c.non_persistent_save_interval}; a persistent save step saves no local one)")
        elif not local and not c.save_interval:
            yield f"{where}: the trainer saves no checkpoints (set checkpoint.save_interval)"
        elif step > iters or not (local or persistent):
            yield f"{where}: {step} is not a checkpoint step (save_interval {c.save_interval}, train_iters {iters})"

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


def plan_faults(scenario: Scenario, seed: int) -> list[PlannedFault]:
    """Resolve every random choice of the scenario's faults from `seed`, fault by fault, in order; then the
    preemption signal of a PreemptionPlugin."""
    rng = random.Random(seed)
    planned = [p for i, f in enumerate(scenario.faults) for p in f.plan_all(f"f{i}", rng, scenario.world_size, scenario.command is not None)]
    preemption = preemption_fault(scenario.plugins, scenario.deadline_s, f"f{len(planned)}")
    return planned if preemption is None else [*planned, preemption]
