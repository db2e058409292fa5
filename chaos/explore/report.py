"""What an exploration reports: a summary for the terminal, one JSON object (``--json``), a markdown page and
its picture (the schedules tried on a step x fault-kind grid, the failing ones marked) in the output folder."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from chaos.explore.search import Exploration


def record(result: Exploration) -> dict[str, Any]:
    """The exploration for machines: at least schedules_judged and found (each shrunk scenario, its invariant)."""
    fresh = [r for r in result.records if not r.reused]
    run_s, explore_s = sum(r.run_s for r in fresh), sum(r.explore_s for r in fresh)
    return {
        "base": str(result.options.base),
        "seed": result.options.seed,
        "budget_s": result.options.budget_s,
        "seconds": round(result.seconds, 1),
        "schedules_judged": len(result.records),
        "schedules_reused": len(result.records) - len(fresh),
        "broke_an_invariant": sum(bool(r.broken) for r in result.records),
        "kinds": result.kinds,
        "steps": result.steps,
        "coverage": {"cells_tried": len(tried(result)), "cells": result.cells},
        "overhead": {"run_s": round(run_s, 2), "explore_s": round(explore_s, 2),
                     "ratio": round(explore_s / run_s - 1, 4) if run_s else None},
        "shrink_cut_by_budget": result.shrink_cut,
        "found": [asdict(f) for f in result.found],
        "picture": str(picture_path(result)),
        "summary": str(result.options.out / "explore.md"),
    }


def tried(result: Exploration) -> set[tuple[str, str]]:
    return {tuple(c) for r in result.records for c in r.cells}


def picture_path(result: Exploration) -> Path:
    return result.options.out / "schedules.png"


def summary(result: Exploration) -> str:
    r = record(result)
    lines = [
        f"explore {result.base_name}: {r['schedules_judged']} schedules judged ({r['schedules_reused']} reused) in "
        f"{result.seconds:.0f} s, seed {result.options.seed}; {r['broke_an_invariant']} broke an invariant",
        f"  coverage: {r['coverage']['cells_tried']} of {result.cells} step x fault-kind cells; overhead over the runs: "
        f"{_percent(r['overhead']['ratio'])}",
    ]
    for f in result.found:
        lines += [
            f"  FOUND {f.invariant}: {f.says}",
            f"    schedule:   {_faults(f.schedule)}",
            *([f"    settings:   {_settings(f.settings)}"] if f.settings else []),
            f"    evidence:   {f.evidence}",
            f"    reproduces: {f.reproduced} ({sum(f.reruns)}/{len(f.reruns)} reruns); found after {f.time_to_find_s:.0f} s, "
            f"{f.shrunk_from} failing schedules",
            f"    scenario:   {f.scenario}   (python -m chaos run {f.scenario})",
            f"    run folder: {f.run_dir}",
            f"    picture:    {f.picture}",
        ]
    if not result.found:
        lines.append("  nothing found: every schedule kept every invariant")
    if result.shrink_cut:
        lines.append("  (the budget ended the shrinking: a found schedule is the smallest failure seen by then)")
    lines += [f"  summary: {r['summary']}", f"  picture: {r['picture']}"]
    return "\n".join(lines)


def _settings(settings: dict[str, Any]) -> str:
    """The trainer settings a finding needs (drawn away from the base's), as its scenario file's trainer: states them."""
    return ", ".join(f"{k}: {v}" for k, v in settings.items())


def _percent(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{100 * ratio:+.1f}%"


def _faults(faults: list[dict[str, Any]]) -> str:
    return "; ".join("{" + ", ".join(f"{k}: {v}" for k, v in f.items()) + "}" for f in faults)


def write_markdown(result: Exploration) -> Path:
    r = record(result)
    lines = [
        f"# chaos explore: {result.base_name}", "",
        f"Base `{result.options.base}`, seed {result.options.seed}, budget {result.options.budget_s:g} s, "
        f"{result.seconds:.0f} s spent.", "",
        "| schedules judged | reused | broke an invariant | cells tried | overhead over the runs |",
        "|---|---|---|---|---|",
        f"| {r['schedules_judged']} | {r['schedules_reused']} | {r['broke_an_invariant']} | "
        f"{r['coverage']['cells_tried']} of {result.cells} | {_percent(r['overhead']['ratio'])} |", "",
        f"Fault kinds: {', '.join(result.kinds)}. Steps that matter: {', '.join(map(str, result.steps))}.", "",
        "![schedules](schedules.png)", "", "## Found", "",
    ]
    if not result.found:
        lines.append("Nothing: every schedule kept every invariant.")
    for f in result.found:
        lines += [
            f"### {f.invariant}", "", f"{f.says}.", "",
            f"- schedule: `{_faults(f.schedule)}`", *([f"- settings: `{_settings(f.settings)}`"] if f.settings else []),
            f"- evidence: {f.evidence}",
            f"- reproduces: {f.reproduced} ({sum(f.reruns)}/{len(f.reruns)} reruns)",
            f"- scenario: `{f.scenario}` (`python -m chaos run {f.scenario}`)",
            f"- run folder: `{f.run_dir}`, picture `{f.picture}`",
            f"- found after {f.time_to_find_s:.0f} s; {f.shrunk_from} failing schedules shrunk to this one", "",
        ]
    path = result.options.out / "explore.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def plot(result: Exploration) -> Path:
    """The schedules tried on a step x fault-kind grid: a dot per fault, its size the times tried, red where a
    schedule holding it broke an invariant."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    tries, fails = Counter(), Counter()
    for rec in result.records:
        for cell in map(tuple, rec.cells):
            tries[cell] += 1
            fails[cell] += bool(rec.broken)
    columns = [str(s) for s in result.steps] + sorted({c for _, c in tries if c.startswith("load")})
    rows = list(result.kinds)
    fig = Figure(figsize=(max(6.0, 0.5 * len(columns) + 3), 0.45 * len(rows) + 1.8))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for (kind, col), n in tries.items():
        if kind in rows and col in columns:
            x, y = columns.index(col), rows.index(kind)
            ax.scatter(x, y, s=30 + 25 * n, color="tab:green", alpha=0.5)
            if fails[(kind, col)]:
                ax.scatter(x, y, s=60 + 25 * fails[(kind, col)], color="tab:red", marker="x")
    ax.set_xticks(range(len(columns)), columns, fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_xlim(-0.7, len(columns) - 0.3)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel("step (or a restart's checkpoint load)")
    ax.grid(alpha=0.3)
    broke = sum(bool(r.broken) for r in result.records)
    ax.set_title(f"{result.base_name}: {len(result.records)} schedules, {broke} broke an invariant (red x)", fontsize=9)
    fig.tight_layout()
    path = picture_path(result)
    fig.savefig(path, dpi=110)
    return path


def show(result: Exploration, as_json: bool) -> int:
    """Write the page and picture, print the summary (or the JSON); the exit code: 0 nothing found, 1 found."""
    plot(result)
    write_markdown(result)
    print(json.dumps(record(result), indent=2) if as_json else summary(result))
    return 1 if result.found else 0
