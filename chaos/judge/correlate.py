"""The loss-correlation test: do two runs compute the same per-step losses?

A source is one run's loss curve: a run folder of ours (the final lineage of rank 0's ``step`` events), a
Megatron-LM or Megatron Bridge stdout log (``chaos.adapters.megatron``, the same parser the runner uses),
or TensorBoard event files (``chaos.adapters.tensorboard``, the ``lm loss`` scalar). Every step that
either run has is judged: a step one run lacks (it crashed before it, or went NaN and Megatron printed no
loss) is a divergence, unless the steps compared are named (``StepRange``). Values agree as numpy's
``isclose`` has it, ``|a - b| <= atol + rtol * |b|`` with B the reference, or bit for bit (``exact``).
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.adapters import megatron, tensorboard
from chaos.errors import BadInput
from chaos.judge.timeline import final_losses
from runlog.layout import RunFolderError
from runlog.reader import read_events

BF16_RTOL = 2.0**-7
"""One bf16 unit in the last place, relative: bf16 keeps 8 significant bits (7 stored, 1 implicit), so two
neighbouring bf16 numbers differ by 2**-8 to 2**-7 (about 0.39 to 0.78 %) of their magnitude, 2**-7 where
the reference is a power of two. With it, two losses that round to neighbouring bf16 numbers agree at every
magnitude, and a difference of more than two bf16 units in the last place never does."""
MEGATRON_CI_RTOL = 0.05
"""Megatron-LM's CI judging a pretraining run's ``lm loss`` against its golden values when a bit-for-bit
comparison is not asked for: ``ApproximateTest(atol=0, rtol=0.05)`` in
tests/functional_tests/python_test_utils/test_pretraining_regular_pipeline.py (``CHECK_THRESHOLDS``; main
of 2026-08, unchanged since 2025-10), ``numpy.isclose`` of each step against its golden value."""


class CorrelateError(BadInput):
    """Bad input: a source that cannot be read as a loss curve, a bad tolerance or step range."""


@dataclass(frozen=True)
class Tolerance:
    """When two losses agree: ``|a - b| <= atol + rtol * |b|`` (numpy's ``isclose``), or the same bits."""

    name: str
    rtol: float = 0.0
    atol: float = 0.0
    same_bits: bool = False

    def agree(self, a: float, b: float) -> bool:
        if _same_bits(a, b) or (math.isnan(a) and math.isnan(b)):
            return True
        if self.same_bits or not (math.isfinite(a) and math.isfinite(b)):
            return False
        return abs(a - b) <= self.atol + self.rtol * abs(b)

    @classmethod
    def absolute(cls, atol: float) -> Tolerance:
        return cls.custom(rtol=0.0, atol=atol, name=f"abs {atol:g}")

    @classmethod
    def custom(cls, rtol: float, atol: float, name: str | None = None) -> Tolerance:
        for label, value in (("rtol", rtol), ("atol", atol)):
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise CorrelateError(f"--{label}: {value!r} must be a finite number >= 0")
        return cls(name or f"rtol {rtol:g}, atol {atol:g}", rtol=float(rtol), atol=float(atol))


EXACT = Tolerance("exact", same_bits=True)
"""Same float64 bits (NaN agrees with NaN): what a deterministic rerun of the same config must give."""
BF16 = Tolerance("bf16", rtol=BF16_RTOL)
MEGATRON_CI = Tolerance("megatron-ci", rtol=MEGATRON_CI_RTOL)
PRESETS = {"exact": EXACT, "bf16": BF16, "megatron-ci": MEGATRON_CI}


def tolerance_of(preset: str | None, rtol: float | None, atol: float | None) -> Tolerance:
    """A named preset, or numpy-style ``rtol``/``atol`` (an unset one is 0); not both."""
    if preset is not None and (rtol is not None or atol is not None):
        raise CorrelateError("--tolerance names a preset; give it or --rtol/--atol, not both")
    if rtol is not None or atol is not None:
        return Tolerance.custom(rtol or 0.0, atol or 0.0)
    name = preset or "exact"
    if name not in PRESETS:
        raise CorrelateError(f"--tolerance: {name!r} is not a preset ({', '.join(PRESETS)}); use --rtol/--atol for numbers")
    return PRESETS[name]


@dataclass(frozen=True)
class StepRange:
    """Steps ``first`` to ``last``, both included; an unset end is open."""

    first: int | None = None
    last: int | None = None

    @classmethod
    def parse(cls, text: str) -> StepRange:
        """``N``, ``N-M``, ``N-`` or ``-M``."""
        m = re.fullmatch(r"\s*(\d*)\s*(-?)\s*(\d*)\s*", text)
        if m is None or not (m[1] or m[3]) or (not m[2] and not m[1]):
            raise CorrelateError(f"--steps: {text!r} is not N, N-M, N- or -M")
        first = int(m[1]) if m[1] else None
        last = (int(m[3]) if m[3] else None) if m[2] else first
        if first is not None and last is not None and first > last:
            raise CorrelateError(f"--steps: {text!r} ends before it starts")
        return cls(first, last)

    def __contains__(self, step: int) -> bool:
        return (self.first is None or step >= self.first) and (self.last is None or step <= self.last)

    def __str__(self) -> str:
        if self.first == self.last:
            return str(self.first)
        return f"{'' if self.first is None else self.first}-{'' if self.last is None else self.last}"


@dataclass(frozen=True)
class Curve:
    """One run's loss by step, and what it was read from."""

    source: str
    kind: str
    losses: dict[int, float]


def read_curve(source: str | Path) -> Curve:
    """A run folder, a TensorBoard event file or folder, or a Megatron training log."""
    path = Path(source)
    if path.is_dir():
        if (path / "events").is_dir():
            return Curve(str(path), "run folder", _run_folder_losses(path))
        if tensorboard.event_files(path):
            return Curve(str(path), "tensorboard", _tensorboard_losses(path))
        raise CorrelateError(f"{path}: not a run folder (no events/) nor a TensorBoard folder (no events.out.tfevents.* file)")
    if tensorboard.is_event_file(path):
        return Curve(str(path), "tensorboard", _tensorboard_losses(path))
    if path.is_file():
        return Curve(str(path), "megatron log", _log_losses(path))
    raise CorrelateError(f"{path}: no such file or folder")


def read_losses(source: str | Path) -> dict[int, float]:
    """Losses by step of any source ``read_curve`` reads."""
    return read_curve(source).losses


def _run_folder_losses(path: Path) -> dict[int, float]:
    try:
        losses = {int(i): float(v) for i, v in final_losses(read_events(path)).items()}
    except RunFolderError as e:
        raise CorrelateError(f"unreadable event log: {e}") from None
    if not losses:
        raise CorrelateError(f"{path}: no loss in this run folder (no rank-0 step event in events/)")
    return losses


def _tensorboard_losses(path: Path) -> dict[int, float]:
    try:
        return tensorboard.read_scalars(path, megatron.LOSS_KEY)
    except tensorboard.TensorBoardError as e:
        raise CorrelateError(str(e)) from None


def _log_losses(path: Path) -> dict[int, float]:
    try:
        with open(path, errors="replace") as f:
            losses = megatron.final_losses(megatron.parse_lines(line.rstrip("\n") for line in f))
    except OSError as e:
        raise CorrelateError(f"{path}: unreadable log ({e.strerror or e})") from None
    if not losses:
        raise CorrelateError(f"{path}: no loss in this log (no Megatron iteration line: 'iteration N/ M | ... | lm loss: X |')")
    return losses


@dataclass(frozen=True)
class StepDiff:
    """One step judged: both values (None where a run lacks the step), their differences, the verdict."""

    iteration: int
    a: float | None
    b: float | None
    agree: bool

    @property
    def missing(self) -> str | None:
        """Which run lacks this step: "a", "b", or None."""
        return "a" if self.a is None else "b" if self.b is None else None

    @property
    def abs_diff(self) -> float | None:
        """|a - b|: 0 for the same bits or NaN on both sides, inf when only one is NaN or infinite."""
        if self.a is None or self.b is None:
            return None
        if _same_bits(self.a, self.b) or (math.isnan(self.a) and math.isnan(self.b)):
            return 0.0
        diff = abs(self.a - self.b)
        return math.inf if math.isnan(diff) else diff

    @property
    def rel_diff(self) -> float | None:
        """|a - b| / |b|, B being the reference; inf where B is 0 and A is not."""
        diff = self.abs_diff
        if diff is None or diff == 0.0:
            return diff
        return diff / abs(self.b) if self.b else math.inf


@dataclass(frozen=True)
class Correlation:
    """Two loss curves compared step by step, every step either has (within ``steps`` when named)."""

    tolerance: Tolerance
    diffs: tuple[StepDiff, ...]
    steps: StepRange | None = None

    @property
    def passed(self) -> bool:
        return bool(self.diffs) and all(d.agree for d in self.diffs)

    @property
    def divergence(self) -> StepDiff | None:
        return next((d for d in self.diffs if not d.agree), None)

    @property
    def first_divergence(self) -> int | None:
        return None if self.divergence is None else self.divergence.iteration

    @property
    def value_a(self) -> float | None:
        return None if self.divergence is None else self.divergence.a

    @property
    def value_b(self) -> float | None:
        return None if self.divergence is None else self.divergence.b

    @property
    def compared(self) -> int:
        """Steps both runs have."""
        return sum(1 for d in self.diffs if d.missing is None)

    def only_in(self, run: str) -> int:
        """Steps only run ``run`` ("a" or "b") has."""
        return sum(1 for d in self.diffs if d.missing == ("b" if run == "a" else "a"))

    @property
    def max_abs_diff(self) -> float | None:
        return max((d.abs_diff for d in self.diffs if d.abs_diff is not None), default=None)

    @property
    def max_rel_diff(self) -> float | None:
        return max((d.rel_diff for d in self.diffs if d.rel_diff is not None), default=None)

    def summary(self) -> str:
        """One line: the verdict, the first divergent step and what differs there."""
        within = f" in steps {self.steps}" if self.steps else ""
        if not self.diffs:
            return f"no steps to compare{within}"
        first = self.divergence
        if first is None:
            head = f"losses agree ({self.tolerance.name}) on {self.compared} steps{within}"
        else:
            head = (
                f"losses diverge ({self.tolerance.name}) at iteration {first.iteration}: "
                f"{_show(first.a)} vs {_show(first.b)}; {self.compared} steps compared{within}"
            )
        worst = "" if self.max_abs_diff is None else f", max abs diff {self.max_abs_diff:.3g}"
        missing = ""
        if self.only_in("a") or self.only_in("b"):
            missing = f"; {self.only_in('a')} steps only in a, {self.only_in('b')} only in b"
        return f"{head}{worst}{missing}"

    def table(self) -> str:
        """One row per judged step: both losses, |a - b|, |a - b| / |b|, and whether they agree."""
        rows = [f"{'step':>8}  {'a':>22}  {'b':>22}  {'abs diff':>10}  {'rel diff':>10}  verdict"]
        for d in self.diffs:
            verdict = "ok" if d.agree else f"MISSING in {d.missing}" if d.missing else "DIVERGE"
            rows.append(
                f"{d.iteration:>8}  {_show(d.a):>22}  {_show(d.b):>22}  {_show(d.abs_diff, 3):>10}  "
                f"{_show(d.rel_diff, 3):>10}  {verdict}"
            )
        return "\n".join(rows)

    def to_dict(self) -> dict[str, Any]:
        """The correlation for machines (CI dashboards): non-finite numbers as the strings nan, inf, -inf."""
        first = self.divergence
        return {
            "passed": self.passed,
            "summary": self.summary(),
            "tolerance": {"name": self.tolerance.name, "rtol": self.tolerance.rtol, "atol": self.tolerance.atol,
                          "same_bits": self.tolerance.same_bits},
            "steps_range": None if self.steps is None else str(self.steps),
            "compared": self.compared,
            "only_in_a": self.only_in("a"),
            "only_in_b": self.only_in("b"),
            "first_divergence": None if first is None else {
                "iteration": first.iteration, "a": json_number(first.a), "b": json_number(first.b), "missing": first.missing,
            },
            "max_abs_diff": json_number(self.max_abs_diff),
            "max_rel_diff": json_number(self.max_rel_diff),
            "steps": [
                {"iteration": d.iteration, "a": json_number(d.a), "b": json_number(d.b), "abs_diff": json_number(d.abs_diff),
                 "rel_diff": json_number(d.rel_diff), "agree": d.agree, "missing": d.missing}
                for d in self.diffs
            ],
        }


def correlate(a: dict[int, float], b: dict[int, float], tolerance: Tolerance, steps: StepRange | None = None) -> Correlation:
    """Judge every step either curve has (within ``steps`` when given): a step one lacks diverges."""
    judged = sorted(i for i in a.keys() | b.keys() if steps is None or i in steps)
    diffs = []
    for i in judged:
        va, vb = a.get(i), b.get(i)
        diffs.append(StepDiff(i, va, vb, va is not None and vb is not None and tolerance.agree(va, vb)))
    return Correlation(tolerance, tuple(diffs), steps)


PLOT_FOLDER = Path("chaos-runs") / "correlate"
"""Where a picture goes unless ``--plot`` says: beside the run folders ``chaos run`` makes (its ``--out``
default), never loose in the current folder."""


def default_plot_path(a: str | Path, b: str | Path) -> Path:
    """``chaos-runs/correlate/<a>-vs-<b>.png``, each source named by its folder, or a file by its folder and
    name (two Megatron runs' ``output.log`` are two pictures)."""
    return PLOT_FOLDER / f"{_stem(a)}-vs-{_stem(b)}.png"


def _stem(source: str | Path) -> str:
    path = Path(source).resolve()
    name = (path.name if path.is_dir() else f"{path.parent.name}_{path.name}") or "root"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:60]


def _same_bits(a: float, b: float) -> bool:
    return struct.pack("<d", a) == struct.pack("<d", b)


def json_number(value: float | None) -> float | str | None:  # strict JSON: nan, inf, -inf as strings
    if value is None or math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"


def _show(value: float | None, digits: int | None = None) -> str:
    """A loss as Python's shortest round-trip repr (two different floats never print alike); a
    difference to ``digits`` significant digits."""
    if value is None:
        return "missing"
    return repr(value) if digits is None else f"{value:.{digits}g}"

