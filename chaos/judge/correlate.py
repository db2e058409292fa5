"""The loss-correlation test: do two runs compute the same per-step losses?

A source is a run folder (its final-lineage rank-0 losses) or a text log with Megatron-style training lines,
so our trainer can be checked against Megatron-LM or Megatron Bridge logs of the same config. A later line
for an iteration replaces an earlier one, as a restarted run recomputes the steps it lost.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from chaos.judge.timeline import final_losses
from runlog.reader import read_events

Tolerance = str | float
"""``"exact"`` (bit for bit), ``"bf16"`` (relative 2**-7) or an absolute tolerance."""

BF16_RELATIVE = 2.0**-7
"""bf16 keeps 8 significant bits: two correct bf16 runs can differ by one unit in the last place."""

_NUMBER = r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?|nan|inf)"
_LINE = re.compile(rf"\biteration\s+(\d+)\s*/\s*\d+\s*\|.*?\blm loss:?\s+({_NUMBER})", re.IGNORECASE)


@dataclass(frozen=True)
class Correlation:
    """The outcome of comparing two loss curves on the iterations both have."""

    passed: bool
    tolerance: str
    compared: int
    only_in_a: int
    only_in_b: int
    first_divergence: int | None = None
    value_a: float | None = None
    value_b: float | None = None
    max_abs_diff: float | None = None

    def summary(self) -> str:
        if not self.compared:
            return f"no common steps to compare ({self.only_in_a} only in a, {self.only_in_b} only in b)"
        if self.first_divergence is None:
            head = f"losses agree ({self.tolerance}) on {self.compared} steps"
        else:
            head = (
                f"losses diverge ({self.tolerance}) at iteration {self.first_divergence}: "
                f"{self.value_a!r} vs {self.value_b!r}; {self.compared} steps compared"
            )
        missing = ""
        if self.only_in_a or self.only_in_b:
            missing = f"; {self.only_in_a} steps only in a, {self.only_in_b} only in b"
        return f"{head}, max abs diff {self.max_abs_diff:.3g}{missing}"


def read_losses(source: str | Path) -> dict[int, float]:
    """Losses by iteration from a run folder or a training log."""
    path = Path(source)
    if path.is_dir():
        return final_losses(read_events(path))
    return parse_log(path.read_text(errors="replace"))


def parse_log(text: str) -> dict[int, float]:
    """Losses from Megatron-LM/Bridge lines (``lm loss: 5.4E+00``) and ours (``lm loss 5.4``)."""
    losses: dict[int, float] = {}
    for line in text.splitlines():
        match = _LINE.search(line)
        if match:
            losses[int(match.group(1))] = float(match.group(2))
    return dict(sorted(losses.items()))


def correlate(a: dict[int, float], b: dict[int, float], tolerance: Tolerance) -> Correlation:
    """Compare the iterations both curves have; the ones only one has are counted, not judged."""
    agree, label = _agreement(tolerance)
    common = sorted(a.keys() & b.keys())
    counts = {"compared": len(common), "only_in_a": len(a.keys() - b.keys()), "only_in_b": len(b.keys() - a.keys())}
    if not common:
        return Correlation(False, label, **counts)
    diverging = next((i for i in common if not agree(a[i], b[i])), None)
    worst = max(_abs_diff(a[i], b[i]) for i in common)
    if diverging is None:
        return Correlation(True, label, **counts, max_abs_diff=worst)
    return Correlation(
        False, label, **counts, first_divergence=diverging, value_a=a[diverging], value_b=b[diverging], max_abs_diff=worst
    )


def _agreement(tolerance: Tolerance) -> tuple[Callable[[float, float], bool], str]:
    """The agreement test for a tolerance, and how to name it."""
    if tolerance == "exact":
        return _same_bits, "exact"
    if tolerance == "bf16":
        return _within_bf16, "bf16"
    try:
        absolute = float(tolerance)
    except ValueError:
        raise ValueError(f"tolerance: {tolerance!r} is not 'exact', 'bf16' or a number") from None
    if not absolute >= 0:
        raise ValueError(f"tolerance: {tolerance!r} must be a number >= 0")
    return partial(_within, tolerance=absolute), f"abs {absolute:g}"


def _same_bits(a: float, b: float) -> bool:
    return struct.pack("<d", a) == struct.pack("<d", b)


def _within(a: float, b: float, tolerance: float) -> bool:
    return _same_bits(a, b) or abs(a - b) <= tolerance


def _within_bf16(a: float, b: float) -> bool:
    return _same_bits(a, b) or abs(a - b) <= BF16_RELATIVE * max(abs(a), abs(b))


def _abs_diff(a: float, b: float) -> float:
    """|a - b|, with 0 for identical bits (NaN == NaN here) and inf when only one is NaN."""
    if _same_bits(a, b):
        return 0.0
    diff = abs(a - b)
    return math.inf if math.isnan(diff) else diff
