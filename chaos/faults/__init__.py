"""Every fault kind, in one place: a package per fault family (docs/architecture.md, "Adding a fault").

Each family declares, in its ``__init__`` docstring, where it acts (inside a rank, from outside, on the
machine), how it is undone and what is expected to detect it; its ``planned`` module holds the frozen
dataclasses the side that fires it reads from plan.json (standard library: the ranks import them), its
``schema`` module the pydantic models a scenario's author writes, each naming its planned class.

- plan.py: the planned-fault base and plan.json; in_rank.py, outside.py: the bases of the kinds fired inside
  the ranks and from outside, and what they act through; in_rank_kinds.py, outside_kinds.py: the planned
  kinds each side fires (the ranks import only the first).
- spec.py: the schema base of every kind; registry.py: every kind a scenario may name.
"""
