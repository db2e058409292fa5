"""`python -m benchmarks [--quick] [--suite] [--reps N] [--worlds 1,2,4] [--before DIR] [--out DIR]`;
`python -m benchmarks mutants [--budget 90s]` (benchmarks/mutants); `python -m benchmarks attribution [--runs DIR]
[--launch]` (benchmarks/attribution.py); `python -m benchmarks forecast` (benchmarks/forecast.py);
`python -m benchmarks coverage [--write]` (benchmarks/coverage.py)."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks import jobs, report, sections
from benchmarks.runs import BenchmarkFailed, PointRunner

SECTION_ORDER = ("recovery", "overhead", "lost_work", "detection", "scale", "startup", "mainjob")
"""The sections with the most distinct setups first, so a setup that fails shows within minutes."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description="Detection, recovery, lost work and overhead, side by side.")
    p.add_argument("--out", type=Path, default=Path("chaos-runs/bench"), help="output folder (default: %(default)s)")
    p.add_argument("--reps", type=int, default=1, help="runs per point; tables show medians (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="a smoke subset (3 runs), for the unit test")
    p.add_argument("--suite", action="store_true", help="also time the functional suite through nox, serial and -n 2 (long)")
    p.add_argument("--before", type=Path, default=None, metavar="DIR",
                   help="a checkout of an earlier commit: the start-up, main job and suite also run there, side by side")
    p.add_argument("--sections", default=",".join(SECTION_ORDER), help="which sections to run (default: %(default)s)")
    p.add_argument("--worlds", default=None, help="world sizes of the scale section, e.g. 1,2,4,8 (default: 1,2,4)")
    args = p.parse_args(argv)
    if args.reps < 1:
        p.error("--reps must be at least 1")
    unknown = set(args.sections.split(",")) - set(SECTION_ORDER)
    if unknown:
        p.error(f"--sections: unknown {sorted(unknown)}; known: {', '.join(SECTION_ORDER)}")
    if args.before is not None:
        args.before = args.before.resolve()
        if not (args.before / "trainer").is_dir() or not (args.before / "noxfile.py").is_file():
            p.error(f"--before: {args.before} is not a checkout of this project (no trainer/ and noxfile.py)")
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    grid = sections.Grid.quick() if args.quick else sections.Grid()
    if args.worlds:
        grid = replace(grid, worlds=tuple(int(w) for w in args.worlds.split(",")))
    grid = replace(grid, before=args.before)
    runner = PointRunner(out / "runs", args.reps)
    start = time.monotonic()
    results: dict[str, Any] = {"reps": args.reps, "quick": args.quick, "sections": {}}
    for name in (n for n in SECTION_ORDER if n in args.sections.split(",")):
        results["sections"][name] = getattr(sections, name)(runner, grid)
        write_outputs(out, results, start)
    if args.suite:
        results["sections"]["suite"] = jobs.suite(grid.roots())
        write_outputs(out, results, start)
    print(f"bench: {results['seconds']:.0f} s; wrote {out / 'results.md'}, results.json, results.png")
    return results


def write_outputs(out: Path, results: dict[str, Any], start: float) -> None:
    """Rewritten after every section, so a long run that is stopped still leaves what it measured."""
    results["seconds"] = time.monotonic() - start
    results["machine"] = report.machine()
    report.write_json(out / "results.json", results)
    report.write_markdown(out / "results.md", results)
    report.plot(out / "results.png", results["sections"])


def main(argv: list[str] | None = None) -> int:
    sys.stdout.reconfigure(line_buffering=True)  # one progress line per run, also when logged to a file
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["mutants"]:  # seeded resiliency bugs (benchmarks/mutants): a benchmark of its own
        from benchmarks.mutants.bench import main as mutants

        return mutants(argv[1:])
    if argv[:1] == ["attribution"]:  # who names the culprit, over the catalogue's run folders
        from benchmarks.attribution import main as attribution

        return attribution(argv[1:])
    if argv[:1] == ["forecast"]:  # the forecast against soaks, and its speed (benchmarks/forecast.py)
        from benchmarks.forecast import main as forecast

        return forecast(argv[1:])
    if argv[:1] == ["coverage"]:  # which resiliency settings the scenarios exercise under a fault (benchmarks/coverage.py)
        from benchmarks.coverage import main as coverage

        return coverage(argv[1:])
    try:
        run(parse_args(argv))
    except BenchmarkFailed as e:
        print(f"bench: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
