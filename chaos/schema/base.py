"""The schema's footing: strict models (frozen, unknown keys refused with the known ones named)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError


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
            for key in data:
                if key not in cls.model_fields:
                    ctx = {"key": key, "known": ", ".join(cls.model_fields)}
                    raise PydanticCustomError("unknown_key", "unknown key; known: {known}", ctx)
        return data
