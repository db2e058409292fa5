"""pydantic's errors and YAML's, reworded as one line in the words of the scenario's author."""

from __future__ import annotations

import re
from typing import Any

from pydantic_core import ErrorDetails

from chaos.strict import RULE, show

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
            out += f"[{show(key)}]"
    return out


def describe(error: ErrorDetails) -> str:
    """One pydantic error as ``field.path: problem``, in the words of the scenario's author."""
    path, kind, ctx = _user_loc(error["loc"]), error["type"], error.get("ctx", {})
    if kind == "unknown_key":
        path.append(ctx["key"])
        problem = error["msg"]
    elif kind == "union_tag_invalid":
        path.append("type")
        known = ", ".join(re.findall(r"'([^']*)'", ctx["expected_tags"]))
        problem = f"unknown fault type {show(error['input']['type'])}; known: {known}"
    elif kind == "union_tag_not_found":
        path.append("type")
        problem = "required"
    elif kind == "missing":
        problem = "required"
    elif kind == RULE:
        problem = error["msg"]
    elif kind == "value_error":
        problem = error["msg"].removeprefix("Value error, ")
    elif path and path[-1] == "[key]":
        path.pop()
        problem = f"keys must be strings, got {show(error['input'])}"
    else:
        expected = _EXPECTED.get(kind) or re.sub(r"^\w+ should", "must", error["msg"])
        problem = f"{expected}, got {show(error['input'])}"
    where = _render(path)
    return f"{where}: {problem}" if where else problem
