"""The CLI's correlation of two sources with its picture: both curves over the judged steps, and their
relative difference against the tolerance, written atomically. Beside chaos/judge/correlate.py, which
judges and never draws (this module reads it; it reads nothing of this one)."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any

from chaos.judge.correlate import (
    CorrelateError,
    Correlation,
    Curve,
    StepRange,
    Tolerance,
    correlate,
    read_curve,
)


def compare_sources(
    a: str | Path, b: str | Path, tolerance: Tolerance, steps: StepRange | None = None, plot: str | Path | None = None,
    *, make_folder: bool = False,
) -> tuple[Correlation, Path | None]:
    """Read both sources, judge them, draw the picture (when ``plot`` is given): the CLI's whole job. The
    picture's folder must exist, or with ``make_folder`` (the default picture's) is made once both sources
    were read: bad input leaves nothing behind."""
    if plot is not None and not make_folder and not Path(plot).parent.is_dir():
        raise CorrelateError(f"--plot: {Path(plot).parent} is not a folder")
    curve_a, curve_b = read_curve(a), read_curve(b)
    result = correlate(curve_a.losses, curve_b.losses, tolerance, steps)
    if not result.diffs:
        raise CorrelateError(f"neither {a} nor {b} has a step in {steps}")
    if plot is None:
        return result, None
    try:
        if make_folder:
            Path(plot).parent.mkdir(parents=True, exist_ok=True)
        return result, plot_correlation(result, curve_a, curve_b, plot)
    except OSError as e:
        raise CorrelateError(f"--plot: cannot write {plot} ({e.strerror or e})") from None


def plot_correlation(result: Correlation, a: Curve, b: Curve, out: str | Path) -> Path:
    """Both loss curves over the judged steps, and their relative difference against the tolerance;
    the first divergent step is marked. Written atomically (temp file, rename)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(11, 7), layout="constrained")
    FigureCanvasAgg(fig)  # Agg without pyplot, as chaos/report.py draws
    curves, rel = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    for curve, label, style in ((a, "a", "o-"), (b, "b", "s--")):
        judged = [d.iteration for d in result.diffs if d.iteration in curve.losses]
        values = [_finite(curve.losses[i]) for i in judged]
        curves.plot(judged, values, style, markersize=4, label=f"{label}: {Path(curve.source).name} ({curve.kind})")
    missing = [d.iteration for d in result.diffs if d.missing]
    if missing:
        curves.plot(missing, [0.02] * len(missing), "rx", markersize=9, mew=2, transform=curves.get_xaxis_transform(),
                    label="step only one run has")
    both = [d for d in result.diffs if d.rel_diff is not None]
    rel.plot([d.iteration for d in both], [_finite(d.rel_diff) for d in both], "k.-", label="|a - b| / |b|")
    if result.tolerance.rtol > 0:
        rel.axhline(result.tolerance.rtol, color="orange", ls="--", label=f"rtol {result.tolerance.rtol:.3g}")
    for ax in (curves, rel):
        if result.divergence is not None:
            ax.axvline(result.divergence.iteration, color="red", lw=1.5, label=f"first divergence (step {result.divergence.iteration})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    curves.set_ylabel("loss")
    rel.set_ylabel("relative difference")
    rel.set_xlabel("step (iteration)")
    rel.xaxis.set_major_locator(MaxNLocator(integer=True))
    colour = "green" if result.passed else "red"
    fig.suptitle(("AGREE: " if result.passed else "DIVERGE: ") + result.summary(), color=colour, fontsize=10, wrap=True)
    return _save_atomically(fig, Path(out))


def _save_atomically(fig: Any, out: Path) -> Path:
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".png")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=100, format="png")
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise
    return out


def _finite(value: float | None) -> float:
    """A value matplotlib can draw: NaN and infinities are left as gaps."""
    return value if value is not None and math.isfinite(value) else math.nan
