"""Reports of a judged run: the journal (JSON), the timeline picture, a few summary lines, and the run's
record for machines (``run_record``: ``--json``, the pytest plugin's summary.json).

The journal is written atomically (temp file, fsync, rename), so a reader never sees half of one and a
crash leaves the previous journal intact. matplotlib is imported only when a picture is drawn.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from chaos.judge.correlate import json_number
from chaos.judge.timeline import Mark, Metrics, Step, Timeline
from chaos.judge.verdicts import Verdict
from chaos.schema.scenario import Scenario
from runlog import names
from runlog.layout import RunFolder

JOURNAL_SCHEMA_VERSION = 1


def build_journal(
    scenario: Scenario,
    run_dir: str | Path,
    timeline: Timeline,
    metrics: Metrics,
    verdicts: Sequence[Verdict],
    extra: dict[str, Any] | None = None,
    *,
    scenario_file: str | Path | None = None,
) -> dict[str, Any]:
    """Everything needed to read (or re-judge) the run later; ``extra`` keys are merged in last."""
    journal = {
        "schema_version": JOURNAL_SCHEMA_VERSION,
        "scenario": {
            "name": scenario.name,
            "file": None if scenario_file is None else str(scenario_file),
            "description": scenario.description,
            "world_size": scenario.world_size,
            "launcher": scenario.launcher,
            "seed": scenario.seed,
            "faults": [f.model_dump() for f in scenario.faults],
        },
        "run_dir": str(run_dir),
        "versions": timeline.versions,
        "seed": scenario.seed,
        "metrics": asdict(metrics),
        "timeline": [asdict(m) for m in timeline.marks],
        "verdicts": [{**asdict(v), "message": v.message()} for v in verdicts],
        "status": "passed" if all(v.passed for v in verdicts) else "failed",
        **(extra or {}),
    }
    # Normalised through JSON once, so the dict equals what a reader of the file gets back.
    return json.loads(json.dumps(journal, default=str))


def write_journal(path: str | Path, journal: dict[str, Any]) -> Path:
    """Write ``journal`` as JSON atomically: the old file stays whole until the new one is on disk."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(journal, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
    return target


def format_summary(journal: dict[str, Any]) -> str:
    """A few lines for a terminal: status, each verdict, where the run and its picture are."""
    lines = [f"{journal['scenario']['name']}: {journal['status'].upper()}"]
    if journal["status"] == "broken":
        lines.append(f"  {BROKEN_NOTE}")
    for v in journal["verdicts"]:
        message = v["message"].replace("\n", "\n       ")  # a failed baseline's log lines, under its verdict
        lines.append(f"  {'ok  ' if v['passed'] else 'FAIL'} {message}")
    lines += [f"  failed recovery from {f['explained_by']}: {_failure(f)}" for f in journal.get("failures", ()) if f.get("recovery_of")]
    attribution = (journal.get("attribution") or {}).get("lines") or []
    if attribution:
        lines.append("  attribution (reported; judged only where expect.culprit or expect.restart_right asks):")
        lines.extend(f"    {line}" for line in attribution)
    lines.append(f"  run folder: {journal['run_dir']}")
    if journal.get("picture"):
        lines.append(f"  picture:    {journal['picture']}")
    return "\n".join(lines)


def _failure(f: dict[str, Any]) -> str:
    """A journal failure as ``Failure.describe`` says it (chaos/judge/accounting.py)."""
    who = "the job" if f["rank"] is None else f"rank {f['rank']}"
    code = f"signal {f['signal']}" if f["signal"] else f"exit code {f['exit_code']}"
    return f"attempt {f['attempt']}, {who}, {code}: {f['cause']}"


BROKEN_NOTE = (
    "the run broke: something other than its injected faults went wrong (below), so it shows no recovery from them"
)

VERDICT_FIELDS = ("name", "passed", "expected", "observed", "bounds", "message")


def run_record(journal: dict[str, Any]) -> dict[str, Any]:
    """A judged run for machines (CI dashboards): status, verdicts and metrics, as strict JSON (NaN and the
    infinities as strings). The metrics leave out the per-step losses and this machine's monotonic clock
    readings (the journal keeps both). docs/scenarios.md ("Output for machines") shows the shape."""
    metrics = {
        k: v for k, v in journal["metrics"].items() if k not in ("losses", "attempt_starts") and not k.endswith("_mono")
    }
    return _strict({
        "scenario": journal["scenario"]["name"],
        "passed": journal["status"] == "passed",
        "status": journal["status"],
        "seed": journal["seed"],
        "run_dir": journal["run_dir"],
        "journal": str(RunFolder(Path(journal["run_dir"])).journal),
        "picture": journal.get("picture"),
        "verdicts": [{key: v.get(key) for key in VERDICT_FIELDS} for v in journal["verdicts"]],
        "metrics": metrics,
    })


def _strict(value: Any) -> Any:
    if isinstance(value, float):
        return json_number(value)
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strict(v) for v in value]
    return value


SUMMARY_COLUMNS = ("time_to_detect_s", "time_to_recover_s", "lost_steps", "restarts", "exit_code")


def summary_table(journals: Sequence[Path]) -> str:
    """A markdown table, one row per journal: status and the headline metrics."""
    head = "| scenario | status | detect (s) | recover (s) | lost steps | restarts | exit | device |"
    rows = [head, "|" + "---|" * 8]
    for path in journals:
        j = json.loads(Path(path).read_text())
        m = j["metrics"]
        cells = [_fmt(m.get(key)) for key in SUMMARY_COLUMNS]
        device = (j.get("versions") or {}).get("device", "")
        rows.append(f"| {j['scenario']['name']} | {j['status']} | " + " | ".join(cells) + f" | {device} |")
    return "\n".join(rows)


def plot_timeline(
    run_dir: str | Path,
    timeline: Timeline,
    metrics: Metrics,
    out_png: str | Path,
    *,
    name: str | None = None,
    status: str | None = None,
) -> Path:
    """Loss against step (one line per attempt) and against time, with fault, detection, restart and
    checkpoint marks. ``name`` defaults to the run folder's name; ``status`` colours the title."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 8), layout="constrained")
    FigureCanvasAgg(fig)  # Agg without pyplot: no global figure state, safe in worker threads
    by_step, by_time = fig.subplots(2, 1)
    _draw_losses(by_step, by_time, timeline.steps)
    _mark_steps(by_step, timeline.marks)
    _mark_times(by_time, timeline, metrics)
    by_step.text(0.99, 0.97, _metrics_text(metrics), transform=by_step.transAxes, ha="right", va="top", ma="left",
                 family="monospace", fontsize=9, bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.9})
    for ax, xlabel in ((by_step, "step (iteration)"), (by_time, "seconds since launch")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("loss (rank 0)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    title = name or Path(run_dir).name
    colour = {"passed": "green", "failed": "red", "broken": "purple", "known failure": "darkorange"}.get(status or "", "black")
    fig.suptitle(f"{title}: {status.upper()}" if status else title, color=colour, fontsize=14, weight="bold")
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    return out


def _by_attempt(steps: Sequence[Step]) -> dict[int, list[Step]]:
    groups: dict[int, list[Step]] = {}
    for s in steps:
        groups.setdefault(s.attempt, []).append(s)
    return groups


def _draw_losses(by_step: Any, by_time: Any, steps: Sequence[Step]) -> None:
    """One colour per attempt; earlier attempts get bigger markers so recomputed steps show around later ones."""
    from matplotlib import colormaps

    palette = colormaps["tab10"]
    for k, (attempt, group) in enumerate(sorted(_by_attempt(steps).items())):
        losses = [s.loss if math.isfinite(s.loss) else math.nan for s in group]
        style = {"color": palette(k % 10), "marker": "os^Dv"[k % 5], "markersize": max(3, 8 - 2 * k), "alpha": 0.85}
        by_step.plot([s.iteration for s in group], losses, label=f"attempt {attempt}", **style)
        by_time.plot([s.t for s in group], losses, label=f"attempt {attempt}", **style)


def _marks(marks: Sequence[Mark], event: str) -> list[Mark]:
    return [m for m in marks if m.event == event]


def _mark_steps(ax: Any, marks: Sequence[Mark]) -> None:
    """Fault and checkpoint marks at the iteration they concern."""
    for m in _marks(marks, names.FAULT_INJECTED):
        if m.info.get("iteration") is not None:  # a fault at a checkpoint load or before any step has no step
            ax.axvline(m.info["iteration"], color="red", lw=2, label=f"fault: {m.info.get('fault', '?')}")
    _ticks(ax, [m.info["iteration"] for m in _marks(marks, names.CHECKPOINT_SAVE_END)])
    for m in _marks(marks, names.CHECKPOINT_LOAD):
        ax.axvline(m.info["iteration"], color="green", ls="-.", lw=1.5, label=f"checkpoint loaded (step {m.info['iteration']})")


def _mark_times(ax: Any, timeline: Timeline, metrics: Metrics) -> None:
    """Fault, detection, attempt starts, checkpoints and the launcher's exit, in seconds since the first event."""
    start = timeline.start_mono
    if metrics.fault_mono is not None:
        ax.axvline(metrics.fault_mono - start, color="red", lw=2, label="fault")
    if metrics.fault_mono is not None and metrics.recover_mono is not None:
        ax.axvspan(metrics.fault_mono - start, metrics.recover_mono - start, color="red", alpha=0.07, label="fault to recovery")
    if metrics.detect_mono is not None:
        ax.axvline(metrics.detect_mono - start, color="orange", lw=2, label=f"detected ({metrics.detected_by})")
    for k, mono in enumerate(metrics.attempt_starts):
        ax.axvline(mono - start, color="purple", ls="--", lw=1.2, label="attempt start" if k == 0 else None)
    _ticks(ax, [m.t for m in _marks(timeline.marks, names.CHECKPOINT_SAVE_END)])
    for k, m in enumerate(_marks(timeline.marks, names.CHECKPOINT_LOAD)):
        ax.axvline(m.t, color="green", ls="-.", lw=1.5, label="checkpoint loaded" if k == 0 else None)
    for m in _marks(timeline.marks, names.LAUNCHER_EXIT):
        ax.axvline(m.t, color="black", ls=":", lw=1.5, label=f"launcher exit ({m.info.get('code')})")


def _ticks(ax: Any, xs: list[float]) -> None:
    """Grey ticks along the bottom edge: checkpoint saves."""
    if xs:
        ax.plot(xs, [0.03] * len(xs), "|", color="grey", markersize=18, mew=2.5,
                transform=ax.get_xaxis_transform(), label="checkpoint saved")


def _metrics_text(metrics: Metrics) -> str:
    rows = (
        ("time to detect", metrics.time_to_detect_s, " s"),
        ("time to recover", metrics.time_to_recover_s, " s"),
        ("lost steps", metrics.lost_steps, "  "),
        ("restarts", metrics.restarts, "  "),
        ("goodput", metrics.goodput, "  "),
    )
    return "\n".join(f"{label:<16}{_fmt(value):>6}{unit if value is not None else ''}" for label, value, unit in rows)


def _fmt(value: float | int | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)
