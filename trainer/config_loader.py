"""The one config loader: a recipe (``--recipe``), then a YAML file (``--config``), then dotted overrides
(``train.train_iters=20``); later ones win. Every key and value is checked against the dataclasses of
trainer/config.py; an unknown key or a bad value raises :class:`ConfigError` naming it. No torch here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml

from trainer.config import ConfigError, TrainerConfig
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
    """Build a TrainerConfig from flat dotted keys; every key and value is checked."""
    sections: dict[str, dict[str, Any]] = {}
    for dotted, value in values.items():
        section, _, name = dotted.partition(".")
        if section not in SECTIONS:
            raise ConfigError(f"unknown config section {section!r} in key {dotted!r}; known: {sorted(SECTIONS)}")
        types_ = _field_types(SECTIONS[section])
        if name not in types_:
            raise ConfigError(f"unknown config key {dotted!r}; {section} has: {sorted(types_)}")
        sections.setdefault(section, {})[name] = _coerce(dotted, value, types_[name])
    try:
        return TrainerConfig(**{s: SECTIONS[s](**kw) for s, kw in sections.items()})
    except TypeError as e:  # pragma: no cover - guarded by the key checks above
        raise ConfigError(str(e)) from None


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


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a config YAML file (safe loader) into flat dotted keys."""
    p = Path(path)
    try:
        tree = yaml.safe_load(p.read_text())
    except OSError as e:
        raise ConfigError(f"cannot read config file {p}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML ({str(e).splitlines()[0]})") from None
    return _flatten(tree or {}, str(p))


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
