"""The chaos command line. Exit codes: 0 every expectation held, 1 a verdict failed, 2 bad input, 130 Ctrl-C."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from chaos.schema.scenario import ScenarioError, load_scenario, scenario_files

DEFAULT_SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


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


def cmd_run(args: argparse.Namespace) -> int:
    from chaos.supervise.runner import run_scenario

    path = resolve(args.scenario, Path(args.scenario_dir))
    scenario = load_scenario(path)
    if args.slurm:
        return _on_slurm(scenario, path, args)
    _runs_here(scenario, f"python -m chaos run --slurm {args.scenario}")
    if args.repeat is not None:
        return _repeat(scenario, path, args)
    outcome = run_scenario(scenario, Path(args.out), scenario_file=path, seed=args.seed, keep=args.keep)
    print(outcome.summary)
    return 0 if outcome.passed else 1


def _runs_here(scenario, command: str) -> None:  # noqa: ANN001 - Scenario, imported lazily
    """A `requires: slurm` scenario is refused by the local runner, with the command that runs it."""
    if scenario.requires == "slurm":
        raise ScenarioError(f"{scenario.name}: requires: slurm; run it on a Slurm cluster with: {command}")


def _on_slurm(scenario, path: Path, args: argparse.Namespace) -> int:  # noqa: ANN001 - Scenario, imported lazily
    from chaos.supervise.slurm import run_on_slurm

    if args.repeat is not None:
        print("error: --slurm submits one job; --repeat is for local runs", file=sys.stderr)
        return 2
    outcome = run_on_slurm(scenario, Path(args.out), scenario_file=path, seed=args.seed, keep=args.keep)
    print(outcome.summary)
    return 0 if outcome.passed else 1


def _repeat(scenario, path: Path, args: argparse.Namespace) -> int:  # noqa: ANN001 - Scenario, imported lazily
    from chaos.repeat import format_repeat, repeat

    if args.repeat < 1 or args.seed is not None:
        print("error: --repeat N needs N >= 1 and draws fresh seeds (leave out --seed)", file=sys.stderr)
        return 2
    outcomes = repeat(scenario, Path(args.out), args.repeat, scenario_file=path)
    print(format_repeat(scenario.name, outcomes))
    return 0 if all(o.passed for o in outcomes) else 1


def cmd_replay(args: argparse.Namespace) -> int:
    from chaos.repeat import replay_inputs
    from chaos.supervise.runner import run_scenario

    scenario, seed = replay_inputs(Path(args.journal))
    _runs_here(scenario, f"python -m chaos run --slurm {scenario.name} --seed {seed}")
    outcome = run_scenario(scenario, Path(args.out), seed=seed, keep=args.keep)
    print(outcome.summary)
    return 0 if outcome.passed else 1


def cmd_list(args: argparse.Namespace) -> int:
    files = scenario_files(args.scenario_dir)
    for path in files:
        try:
            s = load_scenario(path)
        except ScenarioError as e:
            print(f"{path.stem:<24} INVALID  {e}")
            continue
        faults = ", ".join(f.type for f in s.faults) or "none"
        summary = " ".join(s.description.split())[:70]
        print(f"{s.name:<24} {s.world_size} ranks {s.launcher:<11} faults: {faults:<22} {summary}")
    return 0 if files else 2


def cmd_validate(args: argparse.Namespace) -> int:
    bad = 0
    for target in args.files:
        try:
            load_scenario(target)
            print(f"ok: {target}")
        except ScenarioError as e:
            print(f"error: {e}", file=sys.stderr)
            bad += 1
    return 2 if bad else 0


def cmd_correlate(args: argparse.Namespace) -> int:
    from chaos.judge.correlate import (
        CorrelateError,
        StepRange,
        compare_sources,
        default_plot_path,
        tolerance_of,
    )

    try:
        tolerance = tolerance_of(args.tolerance, args.rtol, args.atol)
        steps = None if args.steps is None else StepRange.parse(args.steps)
        plot = Path(args.plot) if args.plot else default_plot_path(args.a, args.b)
        result, picture = compare_sources(args.a, args.b, tolerance, steps, plot)
    except CorrelateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**result.to_dict(), "a": args.a, "b": args.b, "plot": str(picture)}, indent=2))
    else:
        print(f"a: {args.a}\nb: {args.b}\n{result.table()}\n{result.summary()}\npicture: {picture}")
    return 0 if result.passed else 1


def cmd_judge(args: argparse.Namespace) -> int:
    from chaos.supervise.runner import judge_run_dir

    outcome = judge_run_dir(Path(args.run_dir))
    print(outcome.summary)
    return 0 if outcome.passed else 1


def cmd_slurm(args: argparse.Namespace) -> int:
    from chaos.supervise.runner import new_run_dir
    from chaos.supervise.slurm import check_cluster, write_job

    scenario = load_scenario(resolve(args.scenario, DEFAULT_SCENARIOS))
    scenario = scenario.replace(seed=scenario.seed if args.seed is None else args.seed)
    check_cluster(scenario)  # before the run folder is made: a refused scenario leaves nothing behind
    script = write_job(scenario, new_run_dir(Path(args.out), scenario.name))
    print(f"chaos: wrote the job in {script.parent}\n  submit: sbatch {script}\n  judge:  python -m chaos judge {script.parent}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m chaos", description="Break a training run on purpose; judge its recovery.")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one scenario and judge it")
    run.add_argument("scenario", help="a scenario file, or a name from --scenario-dir")
    run.add_argument("--seed", type=int, help="override the scenario's seed (fault plan choices)")
    run.add_argument("--keep", action="store_true", help="keep the run's checkpoints (journal, events and picture are always kept)")
    run.add_argument("--out", default="chaos-runs", help="folder for run folders (default: chaos-runs)")
    run.add_argument("--repeat", type=int, metavar="N", help="run N times with fresh seeds; print pass rate and metric spread")
    run.add_argument("--slurm", action="store_true", help="submit it as a Slurm job (sbatch --wait; --out on shared storage), then judge it")
    run.set_defaults(func=cmd_run)
    ls = sub.add_parser("list", help="list the scenario catalogue")
    ls.set_defaults(func=cmd_list)
    val = sub.add_parser("validate", help="validate scenario files (launches nothing)")
    val.add_argument("files", nargs="+")
    val.set_defaults(func=cmd_validate)
    cor = sub.add_parser(
        "correlate", help="judge whether two runs' per-step losses agree (run folders, Megatron logs, TensorBoard files)",
        description="Exit 0: every step agrees; 1: a step diverges or only one run has it; 2: bad input.",
    )
    cor.add_argument("a", help="run folder, Megatron-LM/Bridge log, or TensorBoard event file or folder")
    cor.add_argument("b", help="the reference, as A (relative differences are |a - b| / |b|)")
    cor.add_argument("--tolerance", help="preset: exact (same bits, the default) or bf16 (rtol 2**-8: one bf16 rounding)")
    cor.add_argument("--rtol", type=float, help="relative tolerance, as numpy.isclose: |a - b| <= atol + rtol * |b|")
    cor.add_argument("--atol", type=float, help="absolute tolerance, as numpy.isclose")
    cor.add_argument("--steps", help="compare only these steps: N, N-M, N- or -M (else every step either run has)")
    cor.add_argument("--json", action="store_true", help="print the result as JSON instead of the table")
    cor.add_argument("--plot", help="the PNG of both curves (default: correlate-A-vs-B.png here)")
    cor.set_defaults(func=cmd_correlate)
    jd = sub.add_parser("judge", help="judge a finished run folder again, from its files alone")
    jd.add_argument("run_dir")
    jd.set_defaults(func=cmd_judge)
    sl = sub.add_parser("slurm", help="write a run folder holding the Slurm job of a scenario (sbatch it yourself)")
    sl.add_argument("scenario", help="a scenario file, or a name from the catalogue")
    sl.add_argument("--out", default="chaos-runs", help="the run folder's parent, on storage every node mounts (default: chaos-runs)")
    sl.add_argument("--seed", type=int, help="override the scenario's seed (fault plan choices)")
    sl.set_defaults(func=cmd_slurm)
    rp = sub.add_parser("replay", help="rerun a journal's run exactly: same scenario, seed and fault plan")
    rp.add_argument("journal", help="a run folder's journal.json")
    rp.add_argument("--out", default="chaos-runs", help="folder for run folders (default: chaos-runs)")
    rp.add_argument("--keep", action="store_true", help="keep the run's checkpoints")
    rp.set_defaults(func=cmd_replay)
    for sp in (run, ls):
        sp.add_argument("--scenario-dir", default=str(DEFAULT_SCENARIOS), help="where scenario files live")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("chaos: interrupted; the run's processes were killed", file=sys.stderr)
        return 130
