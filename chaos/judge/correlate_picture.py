"""The picture of a loss correlation: both curves over the judged steps, and their relative difference
against the tolerance, written atomically."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chaos.judge.correlate import Correlation, Curve


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
