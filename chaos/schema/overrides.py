"""Trainer overrides as a scenario writes them: their values, the keys the runner keeps for itself, and an
explore base's ranges of them (``explore.settings``), each value checked as an override would be."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from chaos.strict import Strict, show
from trainer.config_base import ConfigError

RUNNER_KEYS = (
    "checkpoint.save", "checkpoint.non_persistent_local_ckpt_dir", "logger.run_dir", "fault_injection.component",
    "fault_injection.plan",
)
"""Trainer settings the runner sets (paths into the run folder, the injector that fires the plan); a scenario
may not set them: it never names code to run."""


def _override_value(value: Any) -> Any:
    finite = isinstance(value, float) and math.isfinite(value)
    if value is None or finite or isinstance(value, (bool, int, str)):
        return value
    raise ValueError(f"must be a number, a string, true, false or null, got {show(value)}")


OverrideValue = Annotated[bool | int | float | str | None, BeforeValidator(_override_value)]


class ExploreOptions(Strict):
    """What chaos explore draws on this base besides fault schedules (docs/explore.md)."""

    settings: dict[str, Annotated[list[OverrideValue], Field(min_length=1)]] = Field(default_factory=dict)
    """Trainer settings (dotted keys) and the values explore draws each from; it shrinks them towards the
    base's own value. The catalogue's runs ignore them."""


def settings_problems(explore: ExploreOptions | None, command: bool, build: Callable[[str, Any], object]) -> Iterator[str]:
    """Every value of every settings range builds a config the scenario's world runs (`build(key, value)`: the
    trainer's own checks, as for its `trainer:` overrides); a runner's key, a value listed twice, a `command`
    are refused."""
    if explore is None or not explore.settings:
        return
    if command:
        yield "explore.settings: a `command` runs its own settings; explore can draw none"
        return
    for key, values in explore.settings.items():
        if key in RUNNER_KEYS:
            yield f"explore.settings.{key}: set by the runner (inside the run folder); leave it out"
            continue
        if len(set(map(repr, values))) != len(values):
            yield f"explore.settings.{key}: a value listed twice in {values}"
        for value in values:
            try:
                build(key, value)
            except ConfigError as e:
                yield f"explore.settings.{key}: {show(value)}: {e.problems[0]}"
                break
