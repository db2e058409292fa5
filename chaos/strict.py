"""The schema's footing: strict models (frozen, unknown keys refused with the known ones named), and the
error a model's cross-field rules raise with every problem they found."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

RULE = "scenario_rule"
"""The pydantic error type of a broken cross-field rule (its message is the whole problem)."""


def show(value: Any) -> str:
    """A value as a message quotes it: YAML words, one line, short."""
    if isinstance(value, (dict, list)):
        return "a mapping" if isinstance(value, dict) else "a list"
    text = "null" if value is None else str(value).lower() if isinstance(value, bool) else repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        # Before pydantic's own extra="forbid" check, whose message does not say which keys exist.
        if isinstance(data, dict):
            known = ", ".join(cls.model_fields)
            unknown = [
                InitErrorDetails(type=PydanticCustomError("unknown_key", "unknown key; known: {known}", {"key": key, "known": known}), loc=(), input=data)
                for key in data if key not in cls.model_fields
            ]
            if unknown:
                raise ValidationError.from_exception_data(cls.__name__, unknown)
        return data


def rules_broken(problems: list[str]) -> ValidationError:
    """The error of a model validator whose rules found `problems` (each ``field.path: problem``): pydantic
    merges its errors with the others it collects."""
    errors = [InitErrorDetails(type=PydanticCustomError(RULE, "{problem}", {"problem": p}), loc=(), input=None) for p in problems]
    return ValidationError.from_exception_data("rules", errors)
