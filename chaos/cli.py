"""The chaos command line (``chaos``, or ``python -m chaos``).

Exit codes: 0 every expectation held, 1 a verdict failed (the stack did not recover as expected), 2 bad
input, 3 a broken run (an unexplained failure, a fault that never came due: chaos/judge/run.py), 4 the job
of the folder ``judge`` was given never ran (chaos.errors.NeverRan: one line on stderr), 130 Ctrl-C. A
reader of the output that goes away (``chaos list | head -1``) changes nothing: the command goes on writing
to nowhere and exits as it would have (``ReaderGone``). Bad input of any kind is
one line per problem on stderr, ``error: <what>: <problem>``, and nothing is launched; ``main`` is the one
place that turns an error into those lines: the project's bad-input errors (chaos.errors.BadInput, a
damaged run folder's runlog.layout.RunFolderError), an argument argparse refuses, and an OS error naming
a file. ``--json`` (run, judge, validate, correlate) prints one JSON object on stdout for CI dashboards;
the run's progress lines then go to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from chaos.errors import NEVER_RAN_EXIT, BadInput, NeverRan
from chaos.forecast.cli import add_parser as add_forecast
from chaos.judge.baseline import CACHE_VAR, default_cache_dir
from chaos.schema.loader import load_scenario, scenario_files
from chaos.schema.scenario import Scenario, ScenarioError
from runlog.layout import RunFolderError

if TYPE_CHECKING:
    from chaos.judge.run import RunOutcome

DEFAULT_SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


class Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line (its own print the usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def count(least: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `least`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be >= {least}, got {value}")
        return value

    return parse


def resolve(target: str, folder: Path) -> Path:
    """A scenario given as a file path or as a name in the scenario folder."""
    path = Path(target)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    named = folder / f"{target}.yaml"
    if not named.exists():
        known = ", ".join(p.stem for p in scenario_files(folder)) or "none"
        raise ScenarioError(f"{target}: no such scenario file or name in {folder} (known: {known})")
    return named


def catalogue(folder: Path) -> list[Path]:
    """The scenario files of a folder the user named: a folder, with at least one."""
    if not folder.is_dir():
        raise ScenarioError(f"{folder}: no such folder")
    files = scenario_files(folder)
    if not files:
        raise ScenarioError(f"{folder}: no scenario files (*.yaml) in this folder")
    return files


def progress_out(args: argparse.Namespace) -> Callable[[str], None]:
    """Where a run's progress lines go: stdout, or stderr when stdout carries the JSON."""
    return (lambda line: print(line, file=sys.stderr)) if args.json else print


def show_outcome(args: argparse.Namespace, outcome: RunOutcome) -> int:
    """Print a judged run (its summary, or with --json its record); the exit code it means."""
    from chaos.judge.report import run_record
    from chaos.judge.run import exit_code

    print(json.dumps(run_record(outcome.journal), indent=2) if args.json else outcome.summary)
    return exit_code([outcome.journal["status"]])


def cmd_run(args: argparse.Namespace) -> int:
    from chaos.supervise.runner import run_scenario

    path = resolve(args.scenario, Path(args.scenario_dir))
    scenario = load_scenario(path)
    if args.slurm:
        return _on_slurm(args, scenario, path)
    if args.repeat is not None:
        return _repeat(args, scenario, path)
    outcome = run_scenario(
        scenario, Path(args.out), scenario_file=path, seed=args.seed, keep=args.keep, progress=progress_out(args)
    )
    return show_outcome(args, outcome)


def _on_slurm(args: argparse.Namespace, scenario: Scenario, path: Path) -> int:
    from chaos.supervise.slurm import run_on_slurm

    if args.repeat is not None:
        raise BadInput("--slurm submits one job; --repeat is for local runs")
    outcome = run_on_slurm(scenario, Path(args.out), scenario_file=path, seed=args.seed, keep=args.keep)
    return show_outcome(args, outcome)


def _repeat(args: argparse.Namespace, scenario: Scenario, path: Path) -> int:
    from chaos.judge.report import run_record
    from chaos.judge.run import exit_code
    from chaos.repeat import format_repeat, repeat, spread

    outcomes = repeat(scenario, Path(args.out), args.repeat, scenario_file=path, progress=progress_out(args))
    passed = all(o.passed for o in outcomes)
    code = exit_code([o.journal["status"] for o in outcomes])
    if args.json:
        spreads = {k: dataclasses.asdict(v) for k, v in spread([o.journal for o in outcomes]).items()}
        record = {"scenario": scenario.name, "passed": passed, "runs": [run_record(o.journal) for o in outcomes], "spread": spreads}
        print(json.dumps(record, indent=2))
    else:
        print(format_repeat(scenario.name, outcomes))
    return code


def cmd_replay(args: argparse.Namespace) -> int:
    from chaos.repeat import replay_inputs
    from chaos.supervise.runner import run_scenario

    scenario, seed = replay_inputs(Path(args.journal))
    outcome = run_scenario(scenario, Path(args.out), seed=seed, keep=args.keep)
    print(outcome.summary)
    return 0 if outcome.passed else 1


def cmd_list(args: argparse.Namespace) -> int:
    """The catalogue as a table, a scenario a row, each column as wide as its longest entry (an invalid
    file's row: its name, INVALID and its first problem)."""
    rows: list[tuple[str, ...]] = [("scenario", "ranks", "launcher", "faults", "description")]
    for path in catalogue(Path(args.scenario_dir)):
        try:
            s = load_scenario(path)
        except ScenarioError as e:
            more = f" (and {len(e.problems) - 1} more problems)" if len(e.problems) > 1 else ""
            rows.append((path.stem, "INVALID", f"{e.problems[0]}{more}"))
            continue
        faults = ", ".join(f.type for f in s.faults) or "none"
        rows.append((s.name, str(s.world_size), s.launcher, faults, " ".join(s.description.split())[:70]))
    widths = [max(len(row[i]) for row in rows if len(row) > i + 1) for i in range(4)]
    for row in rows:
        cells = zip(row[:-1], widths[: len(row) - 1], strict=True)
        print("  ".join([*(cell.ljust(width) for cell, width in cells), row[-1]]))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    """Each file checked; every problem of a bad one, one line each (or, with --json, one record per file)."""
    files: list[dict[str, Any]] = []
    for target in args.files:
        try:
            load_scenario(target)
            problems: tuple[str, ...] = ()
        except ScenarioError as e:
            problems = e.problems
        files.append({"file": target, "valid": not problems, "problems": [p.removeprefix(f"{target}: ") for p in problems]})
        if not args.json:
            for line in problems:
                print(f"error: {line}", file=sys.stderr)
            if not problems:
                print(f"ok: {target}")
    valid = all(f["valid"] for f in files)
    if args.json:
        print(json.dumps({"valid": valid, "files": files}, indent=2))
    return 0 if valid else 2


def cmd_correlate(args: argparse.Namespace) -> int:
    from chaos.judge.correlate import StepRange, default_plot_path, tolerance_of
    from chaos.judge.correlate_picture import compare_sources

    tolerance = tolerance_of(args.tolerance, args.rtol, args.atol)
    steps = None if args.steps is None else StepRange.parse(args.steps)
    plot = Path(args.plot) if args.plot else default_plot_path(args.a, args.b)
    result, picture = compare_sources(args.a, args.b, tolerance, steps, plot, make_folder=not args.plot)
    if args.json:
        print(json.dumps({**result.to_dict(), "a": args.a, "b": args.b, "plot": str(picture)}, indent=2))
    else:
        print(f"a: {args.a}\nb: {args.b}\n{result.table()}\n{result.summary()}\npicture: {picture}")
    return 0 if result.passed else 1


def cmd_judge(args: argparse.Namespace) -> int:
    from chaos.supervise.runner import judge_run_dir

    outcome = judge_run_dir(Path(args.run_dir), progress=progress_out(args))
    return show_outcome(args, outcome)


def cmd_slurm(args: argparse.Namespace) -> int:
    from chaos.supervise.runner import new_run_dir
    from chaos.supervise.slurm import check_cluster, write_job

    scenario = load_scenario(resolve(args.scenario, DEFAULT_SCENARIOS))
    scenario = scenario.replace(seed=scenario.seed if args.seed is None else args.seed)
    check_cluster(scenario)  # before the run folder is made: a refused scenario leaves nothing behind
    script = write_job(scenario, new_run_dir(Path(args.out), scenario.name))
    print(f"chaos: wrote the job in {script.parent}\n  submit: sbatch {script}\n  judge:  python -m chaos judge {script.parent}")
    return 0


def cmd_explore(args: argparse.Namespace) -> int:
    """Search fault schedules from a base scenario (chaos/explore; docs/explore.md)."""
    try:
        from chaos.explore.report import show
        from chaos.explore.search import Options, explore, parse_budget
    except ModuleNotFoundError as e:
        raise BadInput(f"chaos explore needs {e.name}: pip install -e '.[test]'") from None
    options = Options(resolve(args.base, DEFAULT_SCENARIOS), parse_budget(args.budget), args.seed, Path(args.out),
                      tuple(n for n in args.faults.split(",") if n) if args.faults else (), args.reruns)
    return show(explore(options, progress_out(args)), args.json)


def package_version() -> str:
    try:
        return f"chaos-harness {version('chaos-harness')}"
    except PackageNotFoundError:
        return "chaos-harness (not installed: pip install -e . in the checkout)"


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="chaos", description="Break a training run on purpose; judge its recovery.",
               epilog="Exit codes: 0 every expectation held, 1 a verdict failed, 2 bad input, 3 a broken run "
               "(a failure no injected fault explains, a fault that never came due), "
               f"{NEVER_RAN_EXIT} the job never ran (judge), 130 Ctrl-C.")
    p.add_argument("--version", action="version", version=package_version())
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one scenario and judge it")
    run.add_argument("scenario", help="a scenario file, or a name from --scenario-dir")
    once = run.add_mutually_exclusive_group()
    once.add_argument("--seed", type=count(0), help="override the scenario's seed (fault plan choices)")
    once.add_argument("--repeat", type=count(1), metavar="N", help="run N times with fresh seeds; print pass rate and metric spread")
    run.add_argument("--keep", action="store_true", help="keep the run's checkpoints (journal, events and picture are always kept)")
    run.add_argument("--out", default="chaos-runs", help="folder for run folders (default: chaos-runs)")
    run.add_argument("--json", action="store_true", help="print the judged run as JSON (progress goes to stderr)")
    run.add_argument("--slurm", action="store_true", help="submit it as a Slurm job (sbatch --wait; --out on shared storage), then judge it")
    run.set_defaults(func=cmd_run)
    ls = sub.add_parser("list", help="list the scenario catalogue")
    ls.set_defaults(func=cmd_list)
    val = sub.add_parser("validate", help="validate scenario files (launches nothing); every problem, one line each")
    val.add_argument("files", nargs="+")
    val.add_argument("--json", action="store_true", help="print one JSON record per file instead")
    val.set_defaults(func=cmd_validate)
    cor = sub.add_parser(
        "correlate", help="judge whether two runs' per-step losses agree (run folders, Megatron logs, TensorBoard files)",
        description="Exit 0: every step agrees; 1: a step diverges or only one run has it; 2: bad input.",
    )
    cor.add_argument("a", help="run folder, Megatron-LM/Bridge log, or TensorBoard event file or folder")
    cor.add_argument("b", help="the reference, as A (relative differences are |a - b| / |b|)")
    cor.add_argument("--tolerance", help="preset: exact (same bits, the default), bf16 (rtol 2**-7: one bf16 unit in the "
                     "last place) or megatron-ci (rtol 0.05: Megatron-LM CI's lm loss golden values)")
    cor.add_argument("--rtol", type=float, help="relative tolerance, as numpy.isclose: |a - b| <= atol + rtol * |b|")
    cor.add_argument("--atol", type=float, help="absolute tolerance, as numpy.isclose")
    cor.add_argument("--steps", help="compare only these steps: N, N-M, N- or -M (else every step either run has)")
    cor.add_argument("--json", action="store_true", help="print the result as JSON instead of the table")
    cor.add_argument("--plot", help="the PNG of both curves (default: chaos-runs/correlate/A-vs-B.png)")
    cor.set_defaults(func=cmd_correlate)
    jd = sub.add_parser(
        "judge", help="judge a finished run folder again: its files, and its fault-free baseline (trained first if not cached)",
        description="Judge a finished run folder from its files. A scenario that expects `baseline:` is compared "
        "with its config's fault-free run, trained first when not cached (a run of its own, seconds to minutes), "
        f"then cached in ${CACHE_VAR}, by default {default_cache_dir()}. Exit 0: every expectation held; 1: a "
        f"verdict failed; 2: bad input; 3: a broken run; {NEVER_RAN_EXIT}: the job never ran (a Slurm job written "
        "and not submitted): nothing judged, no baseline trained.",
    )
    jd.add_argument("run_dir", help="a run folder (chaos run's, or chaos slurm's after its job ran)")
    jd.add_argument("--json", action="store_true", help="print the judged run as JSON")
    jd.set_defaults(func=cmd_judge)
    sl = sub.add_parser("slurm", help="write a run folder holding the Slurm job of a scenario (sbatch it yourself)")
    sl.add_argument("scenario", help="a scenario file, or a name from the catalogue")
    sl.add_argument("--out", default="chaos-runs", help="the run folder's parent, on storage every node mounts (default: chaos-runs)")
    sl.add_argument("--seed", type=count(0), help="override the scenario's seed (fault plan choices)")
    sl.set_defaults(func=cmd_slurm)
    rp = sub.add_parser("replay", help="rerun a journal's run exactly: same scenario, seed and fault plan")
    rp.add_argument("journal", help="a run folder's journal.json")
    rp.add_argument("--out", default="chaos-runs", help="folder for run folders (default: chaos-runs)")
    rp.add_argument("--keep", action="store_true", help="keep the run's checkpoints")
    rp.set_defaults(func=cmd_replay)
    ex = sub.add_parser(
        "explore", help="search fault schedules from a base scenario; shrink what breaks an invariant to a scenario file",
        description="Exit 0: every schedule kept every invariant; 1: something was found (DIR/found/); 2: bad input.",
    )
    ex.add_argument("base", help="the base scenario: a file, or a name from the catalogue (its trainer, world, launcher, settings)")
    ex.add_argument("--budget", default="10m", help="wall time for the search and the shrinking: 10m, 90s, 1h (default: 10m)")
    ex.add_argument("--seed", type=count(0), default=0, help="hypothesis's seed: the same seed draws the same schedules (default: 0)")
    ex.add_argument("--out", default="chaos-runs/explore", help="output folder: runs, found/, report, example database")
    ex.add_argument("--faults", help="comma-separated fault types to draw from (default: every one the base allows)")
    ex.add_argument("--reruns", type=count(1), default=2, help="reruns of each found scenario file (default: 2)")
    ex.add_argument("--json", action="store_true", help="print the result as one JSON object (progress goes to stderr)")
    ex.set_defaults(func=cmd_explore)
    add_forecast(sub)
    for sp in (run, ls):
        sp.add_argument("--scenario-dir", default=str(DEFAULT_SCENARIOS), help="where scenario files live")
    return p


class ReaderGone:
    """stdout or stderr, outliving its reader: once the pipe's reader has gone (`chaos list | head -1`, a
    closed terminal), what is written goes to /dev/null, so no BrokenPipeError stops a command half-way (a
    run keeps its processes reaped and its verdict) and none reaches the user as a traceback."""

    def __init__(self, stream: Any):
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._gone()

    def _gone(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self.stream.fileno())  # what is still buffered, and the interpreter's last flush, go there
        os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def main(argv: list[str] | None = None) -> int:
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = ReaderGone(sys.stdout), ReaderGone(sys.stderr)
    try:
        return _main(argv)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = streams


def _main(argv: list[str] | None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (BadInput, RunFolderError) as e:
        problems = e.problems if isinstance(e, BadInput) else (str(e),)
    except NeverRan as e:
        print(f"chaos: {e}", file=sys.stderr)
        return NEVER_RAN_EXIT
    except OSError as e:  # the machine said no: a file or folder that cannot be written or read
        problems = (f"{e.filename}: {e.strerror}" if e.filename else str(e),)
    except KeyboardInterrupt:
        print("chaos: interrupted; the run's processes were killed", file=sys.stderr)
        return 130
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    return 2
