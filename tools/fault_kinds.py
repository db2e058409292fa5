"""The table of fault kinds in docs/scenarios.md ("Faults"), written from the fault registry
(chaos/faults/registry.py), so that the docs name every kind a scenario may use, and no other.

    python -m tools.fault_kinds           # rewrite the table in docs/scenarios.md
    python -m tools.fault_kinds --check   # exit 1 when the table differs from the registry (tests do this)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from pydantic_core import PydanticUndefined

from chaos.faults.registry import FAULT_KINDS
from chaos.faults.spec import FaultSpec

DOC = Path(__file__).resolve().parent.parent / "docs" / "scenarios.md"
BEGIN = "<!-- fault kinds: written by `python -m tools.fault_kinds` from chaos/faults/registry.py; do not edit -->"
END = "<!-- end of fault kinds -->"
_SENTENCE = re.compile(r"(.+?\.)(?:\s|$)", re.S)


def kind_name(kind: type[FaultSpec]) -> str:
    (name,) = kind.model_fields["type"].annotation.__args__
    return name


def fields(kind: type[FaultSpec]) -> str:
    """The kind's own fields (`name`: required; `name=default`; `name` (optional): none, or a sentence, by
    default), and the shared ones whose default it changes."""
    shown = []
    for name, info in kind.model_fields.items():
        shared = FaultSpec.model_fields.get(name)
        if name == "type" or shared is not None and info.default == shared.default:
            continue
        default = info.default
        if default is PydanticUndefined:
            shown.append(f"`{name}`")
        else:
            prose = default is None or isinstance(default, str) and " " in default  # a message: the model has it
            shown.append(f"`{name}` (optional)" if prose else f"`{name}={json.dumps(default)}`")
    return ", ".join(shown)


def summary(kind: type[FaultSpec]) -> str:
    """The first sentence of the kind's docstring."""
    text = " ".join((kind.__doc__ or "").split())
    match = _SENTENCE.match(text)
    return (match.group(1) if match else text).replace("|", "\\|")


def table() -> str:
    rows = [
        "| type | family | fields beyond the trigger | needs | what it does |",
        "|---|---|---|---|---|",
    ]
    for kind in FAULT_KINDS:
        family = "chaos/faults/" + kind.__module__.split(".")[2]
        needs = f"`requires: {kind.requires}`" if kind.requires else ""
        rows.append(f"| `{kind_name(kind)}` | {family} | {fields(kind)} | {needs} | {summary(kind)} |")
    return "\n".join([BEGIN, *rows, END])


def rewritten(doc: str) -> str:
    """`doc` with its fault-kinds table replaced by the registry's; ValueError when it has no markers."""
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{DOC.name} has no fault-kinds table (the lines {BEGIN!r} ... {END!r})")
    return doc[:start] + table() + doc[end + len(END):]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Write docs/scenarios.md's table of fault kinds from the registry.")
    p.add_argument("--check", action="store_true", help="exit 1 if the table differs from the registry; write nothing")
    args = p.parse_args(argv)
    doc = DOC.read_text()
    try:
        new = rewritten(doc)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if new == doc:
        return 0
    if args.check:
        print(f"error: {DOC.name}: the table of fault kinds differs from chaos/faults/registry.py; "
              "run python -m tools.fault_kinds", file=sys.stderr)
        return 1
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
