"""Reading scenarios: a YAML file or loaded data validated into a Scenario, every problem one line.

pydantic checks every field at once but the cross-field rules only once every field is valid; the loader
validates again without the broken fields until no new one breaks, so a file's problems come all at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from chaos.schema.messages import describe
from chaos.schema.scenario import RULE_INPUTS, SCHEMA_VERSION, UNCHECKED, Scenario, ScenarioError
from chaos.strict import show
from trainer.config_base import ConfigError
from trainer.config_loader import read_yaml


def parse_scenario(data: Any, source: str, *, stem: str | None = None, folder: Path | None = None) -> Scenario:
    """Validate already-loaded data; every problem is one line that starts with `source`. `stem`: the file
    name (without .yaml) the scenario's name must equal. With `folder`, the scenario file's, the command's
    relative files are that folder's and must exist (chaos/schema/command.py); without, the command is taken
    as written (a run folder's copy, whose paths were resolved when it ran)."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario must be a mapping of fields, got {show(data)}")
    version = data.get("schema_version", SCHEMA_VERSION)
    if type(version) is not int or version != SCHEMA_VERSION:
        raise ScenarioError(f"{source}: schema_version: {show(version)} is not supported (use {SCHEMA_VERSION})")
    name = data.get("name")
    scenario, problems = _every_problem(data, folder)
    if stem and isinstance(name, str) and name != stem:
        problems.append(f"name: {name!r} does not match the file name {stem!r}")
    if scenario is None or problems:
        raise ScenarioError(*(f"{source}: {problem}" for problem in dict.fromkeys(problems)))
    return scenario


def _every_problem(data: dict[Any, Any], folder: Path | None) -> tuple[Scenario | None, list[str]]:
    """The scenario, or every problem of `data`. pydantic checks every field at once, but the cross-field
    rules only once every field is valid, and nothing past an unknown key; so the data is validated again
    without the broken fields (left at their defaults) until no new field breaks. Each round adds its field
    errors, and the rules' problems while no RULE_INPUTS field is broken (a rule that reads another broken
    field is not applied: UNCHECKED)."""
    problems: list[str] = []
    broken: set[Any] = set()
    while True:
        try:
            scenario = Scenario.model_validate(
                {k: v for k, v in data.items() if k not in broken}, context={UNCHECKED: frozenset(broken), "folder": folder}
            )
            return (None if broken else scenario), problems
        except ValidationError as e:
            errors = e.errors()
        fields = [(_field_of(error), error) for error in errors]
        problems += [describe(error) for field, error in fields if field is not None and field not in broken]
        if broken.isdisjoint(RULE_INPUTS):
            problems += [describe(error) for field, error in fields if field is None]
        newly = {field for field, _ in fields if field is not None} - broken
        if not newly:
            return None, problems
        broken |= newly


def _field_of(error: Any) -> Any:
    """The top-level field (or unknown key) a pydantic error is about; None for a cross-field rule."""
    if error["loc"]:
        return error["loc"][0]
    return error["ctx"]["key"] if error["type"] == "unknown_key" else None


def load_scenario(path: str | Path, *, named: bool = True) -> Scenario:
    """Read and validate one scenario file; its `name` must be the file's stem, unless not `named` (the copy
    a run folder keeps as scenario.yaml)."""
    p = Path(path)
    try:
        data = read_yaml(p)
    except ConfigError as e:
        raise ScenarioError(*e.problems) from None
    if data is None:
        raise ScenarioError(f"{p}: the file is empty")
    if not named:  # a run folder's copy: its command's paths were resolved when it ran
        return parse_scenario(data, str(p))
    return parse_scenario(data, str(p), stem=p.stem, folder=p.resolve().parent)


def scenario_files(folder: str | Path) -> list[Path]:
    """The scenario files of a folder (``*.yaml``), sorted by name."""
    return sorted(Path(folder).glob("*.yaml"))
