"""Where a catalogue run's time went, per scenario, from the run folders it left (issue 18).

    python -m benchmarks.catalogue chaos-runs [--baselines ~/.cache/chaos-harness/baselines] [--since EPOCH] [--top N]

Every folder below the given ones that holds an event log is a run: its wall time (first launch to the last
launcher exit) split into start-up, build, the trainer's own steps and the rest (``measure.TimeSplit``);
those below ``--baselines`` (the baseline cache, CHAOS_CACHE_DIR) are the fault-free baselines. It prints the
totals and the runs with the most wall time as markdown tables; it reads the folders and writes nothing.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.measure import TimeSplit, time_split
from benchmarks.report import markdown_table
from runlog.layout import RunFolderError
from runlog.reader import read_events

Row = dict[str, object]


@dataclass(frozen=True)
class RunTime:
    name: str
    baseline: bool
    split: TimeSplit


def run_folders(root: Path, since: float = 0.0) -> list[Path]:
    """The run folders under `root` (itself included) whose event log was written at or after `since`."""
    return sorted(p.parent for p in root.glob("**/events") if p.is_dir() and p.stat().st_mtime >= since)


def run_times(runs: list[Path], baselines: list[Path], since: float = 0.0) -> list[RunTime]:
    """Each readable run folder's split, under `runs` (scenario runs) and `baselines` (baseline caches); a
    folder whose log is damaged, or that never launched, is left out."""
    times = []
    for roots, baseline in ((runs, False), (baselines, True)):
        for folder in (f for root in roots for f in run_folders(root, since)):
            try:
                split = time_split(read_events(folder))
            except (RunFolderError, OSError):  # a damaged log (MalformedEvents is one), an unreadable file
                continue
            if split is not None:
                name = folder.name if baseline else folder.name.rsplit("-", 3)[0]
                times.append(RunTime(name, baseline, split))
    return times


def _row(label: str, runs: list[RunTime]) -> Row:
    total = {part: sum(getattr(r.split, part) for r in runs) for part in ("wall", "startup", "build", "steps", "waits")}
    return {"runs": label, "count": len(runs), "attempts": sum(r.split.attempts for r in runs),
            **{f"{k}_s": v for k, v in total.items()}}


def totals(times: list[RunTime]) -> list[Row]:
    """Scenario runs and baselines, each summed."""
    return [_row(label, [t for t in times if t.baseline is baseline]) for label, baseline in (("scenarios", False), ("baselines", True))]


def slowest(times: list[RunTime], top: int) -> list[Row]:
    rows = []
    for t in sorted(times, key=lambda t: -t.split.wall)[:top]:
        s = t.split
        rows.append({"run": t.name + (" (baseline)" if t.baseline else ""), "attempts": s.attempts, "wall_s": s.wall,
                     "startup_s": s.startup, "build_s": s.build, "steps_s": s.steps, "waits_s": s.waits})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.catalogue", description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="scenario run folders, or folders of them (chaos-runs)")
    parser.add_argument("--baselines", type=Path, action="append", default=[], metavar="DIR",
                        help="a baseline cache (CHAOS_CACHE_DIR, by default ~/.cache/chaos-harness/baselines); may repeat")
    parser.add_argument("--since", type=float, default=0.0, help="only runs whose events were written after this Unix time")
    parser.add_argument("--top", type=int, default=20, help="how many of the longest runs to list (default 20)")
    args = parser.parse_args(argv)
    missing = [str(f) for f in [*args.folders, *args.baselines] if not f.is_dir()]
    if missing:
        parser.error(f"not a folder: {', '.join(missing)}")
    times = run_times(args.folders, args.baselines, args.since)
    if not times:
        parser.error(f"no run folder with an event log under {', '.join(map(str, args.folders))}")
    print(markdown_table(totals(times)))
    print()
    print(markdown_table(slowest(times, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
