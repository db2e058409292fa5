"""The benchmark's outputs: results.json, results.md (one table per section) and results.png.

The JSON holds exactly the rows the tables show, plus the machine they came from, so a later reader can
tell whether two result files are comparable.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen before pyplot is imported)

Row = dict[str, Any]

TITLES = {
    "detection": "1. Detection of a hang (rank_hung) against the configured timeout",
    "recovery": "2. Recovery, split into phases, beside the bare start of the same job",
    "lost_work": "3. Lost work against checkpoint interval (rank_killed before step 10), sync vs async save",
    "overhead": "4. Step-time overhead (60 steps, fault-free, median step time after 3 warm-up steps)",
    "scale": "6. Detection and recovery by world size (heartbeat timeout 2 s, checks 0.5 s; ft_launcher kill)",
    "suite": "5. Functional suite wall time",
    "startup": "7. A worker's start-up and exit (world of one, CPU) beside a bare import torch",
    "mainjob": "8. The main job, nox -s functional -- --scenario rank_killed, cold and warm baseline cache, beside its launcher's span",
}
RECOVERY_PARTS = ("detect", "teardown", "rendezvous_import", "build", "checkpoint_load", "first_step")


def machine() -> dict[str, Any]:
    """Where and when the numbers came from; the load average says how busy the machine was."""
    from trainer.loop import versions

    return {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "host": platform.node(), "cpus": os.cpu_count(),
            "load_average_1m": os.getloadavg()[0], "platform": platform.platform(), "versions": versions()}


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def markdown_table(rows: list[Row]) -> str:
    if not rows:
        return "(not measured)\n"
    keys = list(dict.fromkeys(k for r in rows for k in r))
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(_cell(r.get(k)) for k in keys) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_markdown(path: Path, results: dict[str, Any]) -> None:
    m = results["machine"]
    head = (f"# Benchmark results\n\n{m['date']}, {m['host']}: {m['cpus']} CPUs, load average {m['load_average_1m']:.1f} "
            f"at the end; {results['reps']} run(s) per point, medians; times in seconds unless named otherwise.\n")
    done = results["sections"]
    parts = [head] + [f"\n## {title}\n\n{markdown_table(done[name])}" for name, title in TITLES.items() if name in done]
    path.write_text("".join(parts))


def write_json(path: Path, results: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=2))
    tmp.replace(path)


def plot(path: Path, sections: dict[str, list[Row]]) -> None:
    """Detect time against the configured timeout (the y = x floor drawn), and recovery phases as stacked bars."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    _plot_detection(left, sections.get("detection", []))
    _plot_recovery(right, sections.get("recovery", []) + _scale_as_recovery(sections.get("scale", [])))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_detection(ax: Any, rows: list[Row]) -> None:
    series: dict[str, list[Row]] = {}
    for r in rows:
        series.setdefault(f"{r['mode']}, checks every {r['check_interval_s']:g} s", []).append(r)
    for label, rs in series.items():
        ax.plot([r["timeout_s"] for r in rs], [r["detect_s"] for r in rs], marker="o", label=label)
    ax.set(xlabel="configured timeout (s)", ylabel="time to detect (s)", title="hang detection")
    ax.set_ylim(bottom=0)
    timeouts = sorted({r["timeout_s"] for r in rows})
    if timeouts:
        ax.plot(timeouts, timeouts, "k--", label="detect = timeout (the floor)")
        ax.legend(fontsize=8)


def _scale_as_recovery(rows: list[Row]) -> list[Row]:
    return [{**r, "setup": f"ft_launcher kill, {r['world_size']} ranks"} for r in rows]


def _plot_recovery(ax: Any, rows: list[Row]) -> None:
    labels = [f"{r['setup']}\n({r.get('fault', 'rank_killed')})" for r in rows]
    bottom = [0.0] * len(rows)
    for part in RECOVERY_PARTS:
        heights = [r.get(part) or 0.0 for r in rows]
        ax.barh(labels, heights, left=bottom, label=part)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    starts = [r.get("start_s") for r in rows]
    ax.scatter([s or 0.0 for s in starts], labels, marker="|", s=300, color="k", label="bare start (launch → first step)")
    ax.set(xlabel="seconds after the fault", title="recovery phases")
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=4)
