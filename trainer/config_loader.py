"""The one config loader: a recipe (``--recipe``), then a YAML file (``--config``), then dotted overrides
(``train.train_iters=20``); later ones win. Every key and value is checked against the dataclasses of
trainer/config.py; an unknown key or a bad value raises :class:`ConfigError` naming it. No torch here.

``read_yaml`` is the one reader of YAML files (the trainer's config, the harness's scenario files): safe
loading (libyaml's when PyYAML has it: about ten times faster), a size cap, and one line per problem.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml

from trainer.config import TrainerConfig
from trainer.config_base import ConfigError
from trainer.recipes import recipe_values

SECTIONS: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(TrainerConfig)}  # type: ignore[misc]


def _coerce(key: str, value: Any, annotation: Any) -> Any:
    """Check `value` against a field annotation; ints are accepted for floats. Raises ConfigError."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        non_none = [a for a in args if a is not type(None)]
        return _coerce(key, value, non_none[0])
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: must be one of {list(args)}, got {value!r}")
        return value
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        try:
            return float(value)
        except OverflowError:
            raise ConfigError(f"{key}: {value} is too large for a number") from None
    if annotation is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return str(value)
    raise ConfigError(f"{key}: unsupported type {annotation}")


def _field_types(section_cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(section_cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(section_cls)}


def _flatten(tree: Any, source: str, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        raise ConfigError(f"{source}: {prefix or 'top level'} must be a mapping, got {type(tree).__name__}")
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict):
            flat.update(_flatten(value, source, dotted))
        else:
            flat[dotted] = value
    return flat


def build_config(values: dict[str, Any]) -> TrainerConfig:
    """Build a TrainerConfig from flat dotted keys; every key and value is checked, and every problem found
    is reported (each key, each section's own rules; the cross-field rules once the sections are whole)."""
    sections: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    pitfall = None  # the resiliency card's pitfall a section's refusal names, kept for the event log
    for dotted, value in values.items():
        try:
            section, name, checked = _checked(dotted, value)
        except ConfigError as e:
            problems += e.problems
            continue
        sections.setdefault(section, {})[name] = checked
    built = {}
    for section, kw in sections.items():
        try:
            built[section] = SECTIONS[section](**kw)
        except ConfigError as e:
            problems += e.problems
            pitfall = pitfall or e.pitfall
    if problems:
        raise ConfigError(*problems, pitfall=pitfall)
    return TrainerConfig(**built)


def _checked(dotted: str, value: Any) -> tuple[str, str, Any]:
    """(section, key, value as the field's type) of one dotted key; ConfigError when either is wrong."""
    section, _, name = dotted.partition(".")
    if section not in SECTIONS:
        raise ConfigError(f"unknown config section {section!r} in key {dotted!r}; known: {sorted(SECTIONS)}")
    types_ = _field_types(SECTIONS[section])
    if name not in types_:
        raise ConfigError(f"unknown config key {dotted!r}; {section} has: {sorted(types_)}")
    return section, name, _coerce(dotted, value, types_[name])


def parse_override(text: str) -> tuple[str, Any]:
    """'train.train_iters=20' -> ('train.train_iters', 20); the value is read as a YAML scalar."""
    key, sep, raw = text.partition("=")
    if not sep or not key or "." not in key:
        raise ConfigError(f"bad override {text!r}: expected section.key=value, e.g. train.train_iters=20")
    try:
        value = yaml.safe_load(raw) if raw else None
    except yaml.YAMLError:
        value = raw
    if isinstance(value, (dict, list)):
        value = raw
    if isinstance(value, str) and raw.strip()[:1] not in ("'", '"'):
        # YAML 1.1 reads an unquoted 1e-3 (no dot) as a string; on a command line it is plainly a number.
        with contextlib.suppress(ValueError):
            value = float(value) if value.strip().lower() not in ("nan", "inf", "-inf", "infinity") else value
    return key.strip(), value


MAX_YAML_BYTES = 1 << 20
"""The largest YAML file read (1 MiB): configs and scenarios are a few KiB; pure-Python YAML took 184 s over
a 27 MB one, which is a mistake, not a config."""
MAX_YAML_VALUES = 100_000
"""The most values a YAML file may hold once its aliases are expanded (a few lines of anchors can stand for
billions of values, and every reader walks them)."""
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: str | Path) -> Any:
    """A YAML file's data, safely loaded; ConfigError with one line, ``<file>: <problem>``, when the file
    cannot be read, is larger than MAX_YAML_BYTES, is not UTF-8 or not YAML, or holds more than
    MAX_YAML_VALUES values, written out or through its aliases."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_YAML_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{p}: cannot read ({e.strerror or e})") from None
    if len(raw) > MAX_YAML_BYTES:
        size = p.stat().st_size if p.is_file() else None
        shown = f"{size / 1e6:.1f} MB" if size else f"more than {MAX_YAML_BYTES >> 20} MiB"
        raise ConfigError(f"{p}: too large ({shown}); a YAML file read here is at most {MAX_YAML_BYTES >> 20} MiB")
    try:
        data = yaml.load(raw.decode("utf-8"), Loader=_LOADER)  # a safe loader: libyaml's or PyYAML's
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not a text file (not UTF-8)") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {yaml_problem(e)}") from None
    except RecursionError:
        raise ConfigError(f"{p}: not valid YAML: nested too deeply") from None
    except ValueError as e:  # PyYAML reads `2001-02-30` as a date, and datetime refuses it
        raise ConfigError(f"{p}: not valid YAML: {e}") from None
    too_many = _too_many_values(data, MAX_YAML_VALUES)
    if too_many:
        raise ConfigError(f"{p}: {too_many}, the most a YAML file read here may hold")
    return data


def yaml_problem(e: yaml.YAMLError) -> str:
    """A YAML error as ``line L, column C: problem``."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e).partition("\n")[0] or type(e).__name__
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem


def _too_many_values(data: Any, limit: int) -> str | None:
    """What makes `data`, walked as its readers walk it (a shared or recursive node once per reference),
    hold more than `limit` values: its aliases (a list or mapping reached twice before the limit), or the
    values written in the file; None when it holds fewer. Stops counting at the limit."""
    pending, seen, containers, aliased = [data], 0, set(), False
    while pending:
        node = pending.pop()
        seen += 1
        if seen > limit:
            return f"its aliases expand it past {limit} values" if aliased else f"it holds more than {limit} values"
        if isinstance(node, (dict, list)):
            aliased = aliased or id(node) in containers
            containers.add(id(node))
            pending += [*node.keys(), *node.values()] if isinstance(node, dict) else node
    return None


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a config YAML file into flat dotted keys."""
    tree = read_yaml(path)
    try:
        return _flatten(tree or {}, str(path))
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply") from None


def load_config(
    recipe: str | None = None, config_file: str | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> TrainerConfig:
    """Recipe, then YAML file, then dotted overrides; later ones win."""
    values: dict[str, Any] = dict(recipe_values(recipe)) if recipe else {}
    if config_file:
        values.update(load_yaml(config_file))
    for text in overrides:
        key, value = parse_override(text)
        values[key] = value
    return build_config(values)
