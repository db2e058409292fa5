"""Who names the culprit, over the catalogue: fault kind x source -> right / wrong / mixed / silent, with the
time from the fault to the first right claim, and each fault's restart decision (docs/attribution.md).

    python -m benchmarks attribution [--runs chaos-runs] [--launch] [--out DIR]

Every run folder under ``--runs`` is judged from its files (chaos/judge/culprit.py, chaos/judge/attribution.py;
nothing is written into it). ``--launch`` first runs, one at a time through ``python -m chaos run``, the
scenarios of ``CASES`` that have no folder there yet (a folder that exists is never launched again), skipping
those this machine cannot run. The tables go to stdout and to ``attribution.md`` and ``attribution.json`` in
``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.catalogue import run_folders
from benchmarks.points import PROJECT_ROOT
from benchmarks.report import markdown_table
from chaos.faults.plan import plan_records
from chaos.judge.attribution import MIXED, RIGHT, SILENT, WRONG, FaultAttribution, armed_sources, attribute
from chaos.judge.culprit import claims
from chaos.judge.run import scenario_of
from chaos.schema.loader import load_scenario
from chaos.schema.scenario import ScenarioError
from runlog import names
from runlog.layout import RunFolder, RunFolderError
from runlog.reader import read_events

CASES = (
    "rank_hung", "rank_hung_sections", "collective_hang", "collective_hang_flight_recorder", "rank_killed",
    "straggler_report", "nan_transient", "nan_persistent", "nan_persistent_same_node", "spiky_loss",
    "node_killed_2x1", "network_partition_2x1", "node_hung_2x1", "disk_full_during_save",
)
"""The catalogue's scenarios whose faults a CPU source speaks to: a hang, a hang in a collective (with and
without the Flight Recorder), a kill, a straggler, NaN and spikes, a lost, partitioned or hung node; and a
full disk, which has no culprit to name, for its restart decision."""
OUTCOMES = (RIGHT, WRONG, MIXED, SILENT)
Row = dict[str, object]


@dataclass(frozen=True)
class JudgedRun:
    scenario: str
    run_dir: Path
    faults: list[FaultAttribution]


def judge_run(run_dir: Path) -> JudgedRun | None:
    """A run folder's attribution from its files; None for a folder that is not a judgeable run."""
    try:
        scenario = scenario_of(run_dir)
        events = [e for e in read_events(run_dir) if e["event"] != names.CULPRIT_CLAIM]
        plan = plan_records(RunFolder(run_dir).plan) if RunFolder(run_dir).plan.is_file() else []
    except (RunFolderError, ScenarioError, OSError):
        return None
    found = [{**c.fields(), "event": names.CULPRIT_CLAIM, "rank": -1, "wall": wall, "mono": mono}
             for c, wall, mono in claims(events, run_dir)]
    armed = armed_sources(events, dict(scenario.trainer), scenario.launcher, scenario.flight_recorder, scenario.command is not None)
    return JudgedRun(scenario.name, run_dir, attribute(events, found, armed, plan))


def table(runs: list[JudgedRun]) -> list[Row]:
    """One row per fault kind and source: how often it was right, wrong, mixed, silent, and how fast."""
    cells: dict[tuple[str, str], list[tuple[str, float | None, str]]] = defaultdict(list)
    for run in runs:
        for fault in run.faults:
            for s in fault.sources:
                cells[(fault.fault, s.source)].append((s.outcome, s.first_right_s, run.scenario))
    rows = []
    for (fault, source), seen in sorted(cells.items()):
        times = [t for _, t, _ in seen if t is not None]
        rows.append({
            "fault": fault, "source": source, **{o: sum(1 for x, _, _ in seen if x == o) for o in OUTCOMES},
            "first_right_s": statistics.median(times) if times else None,
            "scenarios": ", ".join(sorted({name for _, _, name in seen})),
        })
    return rows


def decisions(runs: list[JudgedRun]) -> list[Row]:
    """Each judged restart decision: the fault, what it wants, what the stack did."""
    rows = []
    for run in runs:
        for fault in run.faults:
            d = fault.decision
            if d is not None:
                verdict = {True: "right", False: "wrong", None: "not seen"}[d.agrees]
                rows.append({"scenario": run.scenario, "fault": fault.fault, "wants": d.right,
                             "stack": d.observed or "none", "how": d.how, "verdict": verdict})
    return sorted(rows, key=lambda r: (str(r["scenario"]), str(r["fault"])))


def launch_missing(root: Path, log: Callable[[str], None] = print) -> None:
    """Run each case without a folder under `root`, one at a time, as a user would (the CLI)."""
    have = {judged.scenario for judged in filter(None, (judge_run(f) for f in run_folders(root)))} if root.is_dir() else set()
    for name in CASES:
        if name in have:
            continue
        path = PROJECT_ROOT / "scenarios" / f"{name}.yaml"
        try:
            load_scenario(path)
        except ScenarioError as e:
            log(f"attribution: {name}: skipped ({e})")
            continue
        done = subprocess.run([sys.executable, "-m", "chaos", "run", str(path), "--out", str(root)],
                              capture_output=True, text=True, check=False)
        status = next((line for line in done.stdout.splitlines() if line.startswith(f"{name}: ")), done.stderr.strip()[-200:])
        log(f"attribution: ran {name}: exit {done.returncode} ({status})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks attribution", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=Path("chaos-runs"), help="run folders, or folders of them (default: %(default)s)")
    parser.add_argument("--launch", action="store_true", help="first run the cases that have no folder under --runs")
    parser.add_argument("--out", type=Path, default=Path("chaos-runs/bench"), help="where the tables go (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.launch:
        args.runs.mkdir(parents=True, exist_ok=True)
        launch_missing(args.runs)
    if not args.runs.is_dir():
        parser.error(f"--runs: not a folder: {args.runs}")
    runs = [j for j in (judge_run(f) for f in run_folders(args.runs)) if j is not None and j.faults]
    if not runs:
        parser.error(f"no run folder with a targeted fault under {args.runs}")
    rows, decided = table(runs), decisions(runs)
    text = f"{markdown_table(rows)}\n\n{markdown_table(decided)}\n"
    print(text, end="")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "attribution.md").write_text(text)
    (args.out / "attribution.json").write_text(json.dumps({"sources": rows, "decisions": decided,
                                                           "runs": [str(r.run_dir) for r in runs]}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
