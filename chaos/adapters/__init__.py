"""Readers of foreign trainers' own output, translated into our event records (docs/events.md).

A trainer that writes no events of its own (Megatron-LM, Megatron Bridge) is still judged from what it
prints and writes: ``megatron`` reads its log lines and checkpoint folder, ``tensorboard`` its TensorBoard
scalars. Pure parsing: nothing here imports the foreign framework.
"""

from __future__ import annotations

from collections.abc import Iterable


def lineage(steps: Iterable[tuple[int, float]]) -> dict[int, float]:
    """Value by step of a run's final lineage, from (step, value) pairs in the order they were written.

    A step number that goes back is a restart recomputing from its checkpoint: the later steps the earlier
    attempt had reached are dropped, and the new attempt's values replace the old ones (TensorBoard's own
    reader keeps both, so the rule is applied here to logs and event files alike).
    """
    values: dict[int, float] = {}
    top = -1
    for step, value in steps:
        if step <= top:
            values = {s: v for s, v in values.items() if s < step}
        values[step], top = value, step
    return values
