"""Statistical runs and exact replays.

``repeat`` runs a scenario N times with fresh seeds (drawn from the OS, printed, and kept in each
journal) and reports the pass rate and the spread (min / median / max) of every numeric metric: one run
says a recovery can work, N runs say how often and how fast. ``replay`` reruns one journal's run exactly:
the same scenario (the copy kept in its run folder), the same seed, and so the same fault plan; the plan
is re-derived and checked against the journal's before anything is launched.
"""

from __future__ import annotations

import json
import secrets
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.judge.run import RunOutcome
from chaos.schema.loader import load_scenario
from chaos.schema.scenario import Scenario, ScenarioError, plan_faults
from chaos.supervise.runner import run_scenario
from runlog.layout import RunFolder, RunFolderError

SPREAD_METRICS = (
    "restarts", "completed_steps", "wall_s", "goodput", "time_to_detect_s", "time_to_recover_s",
    "resumed_from_step", "lost_steps",
)


@dataclass(frozen=True)
class Spread:
    n: int
    min: float
    median: float
    max: float


def fresh_seed() -> int:
    return secrets.randbelow(2**31)


def spread(journals: list[dict[str, Any]]) -> dict[str, Spread]:
    """min / median / max of each numeric metric over the runs that observed it."""
    out = {}
    for name in SPREAD_METRICS:
        values = [j["metrics"].get(name) for j in journals]
        values = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if values:
            out[name] = Spread(len(values), min(values), statistics.median(values), max(values))
    return out


def format_repeat(name: str, outcomes: list[RunOutcome]) -> str:
    passed = sum(o.passed for o in outcomes)
    lines = [f"{name}: {passed}/{len(outcomes)} passed ({100 * passed / len(outcomes):.0f}%)"]
    for o in outcomes:
        lines.append(f"  seed {o.journal['seed']:>10}  {'passed' if o.passed else 'FAILED'}  {o.run_dir}")
    lines.append(f"  {'metric':<20} {'n':>3} {'min':>10} {'median':>10} {'max':>10}")
    for metric, s in spread([o.journal for o in outcomes]).items():
        lines.append(f"  {metric:<20} {s.n:>3} {s.min:>10.4g} {s.median:>10.4g} {s.max:>10.4g}")
    return "\n".join(lines)


def repeat(
    scenario: Scenario, out_dir: Path, n: int, *, scenario_file: Path | None = None,
    seeds: Callable[[], int] = fresh_seed, progress: Callable[[str], None] | None = print,
) -> list[RunOutcome]:
    """Run `scenario` `n` times, each with a new seed; every run keeps its own folder and journal."""
    outcomes = []
    for i in range(n):
        seed = seeds()
        if progress:
            progress(f"chaos: repeat {i + 1}/{n}: seed {seed}")
        outcomes.append(run_scenario(scenario, out_dir, scenario_file=scenario_file, seed=seed, progress=progress))
    return outcomes


def replay_inputs(journal_path: Path) -> tuple[Scenario, int]:
    """The scenario and seed a journal's run used; RunFolderError when the journal or the scenario copy
    beside it cannot be read, ScenarioError when the copy is not a valid scenario or its plan would differ."""
    try:
        journal = json.loads(journal_path.read_bytes())
    except OSError as e:
        raise RunFolderError(f"{journal_path}: cannot read ({e.strerror})") from None
    except (ValueError, RecursionError):
        journal = None
    seed = journal.get("seed") if isinstance(journal, dict) else None
    if type(seed) is not int or seed < 0:
        raise RunFolderError(f"{journal_path}: not a journal (a run folder's journal.json, with the seed it ran)")
    copy = RunFolder(journal_path.parent).scenario
    if not copy.is_file():
        raise RunFolderError(f"{journal_path}: no {copy.name} next to it (replay reads the run's own copy)")
    scenario = load_scenario(copy, named=False)
    if [f.to_json() for f in plan_faults(scenario, seed)] != journal.get("plan", []):
        raise ScenarioError(f"{journal_path}: seed {seed} no longer gives the recorded plan; this code cannot replay it")
    return scenario, seed
