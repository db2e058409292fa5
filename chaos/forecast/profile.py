"""The cost profile: what each kind of failure costs the user's own stack, as measured (or written by hand).

A small YAML (or JSON) file, documented in docs/forecast.md. ``chaos forecast profile`` writes one from
judged run folders (chaos/forecast/measure.py); a user may write or edit one with their cluster's numbers.
Every number is seconds unless its name says steps.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError

from chaos.errors import BadInput
from chaos.strict import Strict
from trainer.config_base import ConfigError
from trainer.config_loader import read_yaml

SCHEMA_VERSION = 1

FaultClass = Literal["process_death", "hang", "preemption", "nan_rerun", "storage"]
CLASSES: tuple[FaultClass, ...] = ("process_death", "hang", "preemption", "nan_rerun", "storage")
"""The fault classes a profile prices and a failure preset draws (docs/forecast.md, "Fault classes")."""

MEASURED_BY: dict[FaultClass, str] = {
    "process_death": "scenarios/rank_killed.yaml",
    "hang": "scenarios/rank_hung.yaml",
    "preemption": "scenarios/sigterm_all.yaml",
    "nan_rerun": "scenarios/nan_transient.yaml",
    "storage": "scenarios/fault_during_checkpoint.yaml",
}
"""The catalogue scenario that measures each class (named when a profile lacks one a preset needs)."""

CLASS_OF_FAULT: dict[str, FaultClass] = {
    "rank_killed": "process_death", "exception": "process_death", "sigkill": "process_death",
    "segfault": "process_death", "abort": "process_death", "host_oom": "process_death", "gpu_oom": "process_death",
    "node_killed": "process_death", "slurm_kill_step": "process_death",
    "rank_hung": "hang", "collective_hang": "hang", "gil_deadlock": "hang", "sigstop": "hang", "node_hung": "hang",
    "network_partition": "hang",
    "sigterm": "preemption", "slurm_requeue": "preemption",
    "nan_loss": "nan_rerun", "spiky_loss": "nan_rerun",
    "fault_during_checkpoint": "storage", "checkpoint_corrupt": "storage", "disk_full": "storage",
    "storage_stall": "storage", "local_checkpoint_lost": "storage",
}
"""Each fault kind of the catalogue by the class of failure it stands for (a kind not named: not priced)."""


class ClassCost(Strict):
    """What one failure of a class costs: detection, relaunch, checkpoint load; lost work as measured."""

    detect_s: float = Field(ge=0)
    """The fault -> the launcher or the trainer acted on it (the judge's time_to_detect_s)."""
    restart_s: float = Field(ge=0)
    """Detection -> the new attempt starts loading: teardown, relaunch, process and process-group start-up."""
    load_s: float = Field(ge=0)
    """The checkpoint load of the new attempt."""
    loses_progress: bool = True
    """False where the stack saves on the fault (a preemption's grace save): no work is lost, one save is paid."""
    lost_steps: float | None = Field(default=None, ge=0)
    """Measured: steps redone after the fault (informative; the model computes lost work from the interval)."""
    lost_s: float | None = Field(default=None, ge=0)
    """Measured: those steps' time."""
    runs: int = Field(default=0, ge=0)
    """How many run folders the numbers are medians of (0: written by hand)."""
    scenarios: list[str] = Field(default_factory=list)
    """The scenarios (or records) they come from."""
    notes: str = ""
    """What was not measured and how it was filled in."""

    @property
    def downtime_s(self) -> float:
        return self.detect_s + self.restart_s + self.load_s


class SaveCost(Strict):
    """Checkpoint saves as the runs made them."""

    interval_steps: int = Field(ge=1)
    """The save interval the runs used (the forecast's default)."""
    stall_s: float = Field(ge=0)
    """The training stall of one save: the step gap across it less a plain step's (async: the blocking part)."""
    is_async: bool = False


class StartupPoint(Strict):
    """Start-up (launch -> first step) measured, or known, at one size."""

    nodes: int = Field(ge=1)
    startup_s: float = Field(ge=0)


class Alternative(Strict):
    """A setting the profile measured beside the base one: the classes and saves it changes."""

    description: str
    classes: dict[FaultClass, ClassCost] = Field(default_factory=dict)
    save: SaveCost | None = None


class Profile(Strict):
    """What failures cost this stack (docs/forecast.md, "The profile")."""

    schema_version: Literal[1] = SCHEMA_VERSION
    source: str
    """Where the numbers come from (run folders, records)."""
    step_time_s: float = Field(gt=0)
    """The steady step time: the useful time of one step."""
    step_overhead_s: float = Field(default=0.0, ge=0)
    """Wall time between steps beyond the step itself (logging, the loop): badput OTHER."""
    startup_s: float = Field(ge=0)
    """The job's first start: launch -> first step."""
    shutdown_s: float = Field(default=0.0, ge=0)
    """The job's end: its last step -> the launcher's exit (counted for a job of so many steps)."""
    startup_scaling: list[StartupPoint] = Field(default_factory=list)
    """Start-up at several sizes, where measured: the forecast interpolates in log(nodes), flat beyond."""
    save: SaveCost
    classes: dict[FaultClass, ClassCost]
    settings: dict[str, str | int | float | bool | None] = Field(default_factory=dict)
    """The settings the runs used (launcher, timeouts, restart mode), for the reader."""
    alternatives: dict[str, Alternative] = Field(default_factory=dict)


class ProfileError(BadInput):
    """A profile file is wrong, or lacks what a forecast needs: one line per problem."""


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile (YAML or JSON); ProfileError naming the file and field otherwise."""
    p = Path(path)
    try:
        data = read_yaml(p)  # JSON is YAML
    except ConfigError as e:
        raise ProfileError(*e.problems) from None
    if not isinstance(data, dict):
        raise ProfileError(f"{p}: not a profile (a mapping with source, step_time_s, startup_s, save, classes)")
    try:
        return Profile.model_validate(data)
    except ValidationError as e:
        raise ProfileError(*(f"{p}: {'.'.join(map(str, err['loc'])) or 'profile'}: {err['msg']}" for err in e.errors())) from None


def save_profile(profile: Profile, path: str | Path | None) -> str:
    """The profile as YAML (JSON for a .json path); written to `path` when given."""
    data = profile.model_dump(mode="json", exclude_defaults=False)
    text = json.dumps(data, indent=2) + "\n" if path and str(path).endswith(".json") else yaml.safe_dump(data, sort_keys=False)
    if path:
        Path(path).write_text(text)
    return text


def require_classes(profile: Profile, needed: set[FaultClass], scenario: str) -> None:
    """Every class the failure scenario draws is priced, else one line naming each missing class and what measures it."""
    missing = [c for c in CLASSES if c in needed and c not in profile.classes]
    if missing:
        named = ", ".join(f"{c!r} (measured by {MEASURED_BY[c]})" for c in missing)
        raise ProfileError(
            f"profile lacks fault class {named}, which {scenario} needs: run the scenario and build the profile with "
            "it (chaos forecast profile RUN_DIR...), or write the class by hand"
        )
