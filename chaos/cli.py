"""The chaos command line. Exit codes: 0 every expectation held, 1 a verdict failed, 2 bad input, 130 Ctrl-C."""

from __future__ import annotations

import argparse
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
    if args.repeat is not None:
        return _repeat(scenario, path, args)
    outcome = run_scenario(scenario, Path(args.out), scenario_file=path, seed=args.seed, keep=args.keep)
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
    from chaos.judge.correlate import correlate

    tolerance: str | float = args.tolerance
    if tolerance not in ("exact", "bf16"):
        try:
            tolerance = float(tolerance)
        except ValueError:
            print(f"error: --tolerance: expected exact, bf16 or a number, got {args.tolerance!r}", file=sys.stderr)
            return 2
    result = correlate(args.a, args.b, tolerance)
    print(result.summary())
    return 0 if result.passed else 1


def cmd_judge(args: argparse.Namespace) -> int:
    from chaos.supervise.runner import judge_run_dir

    outcome = judge_run_dir(Path(args.run_dir))
    print(outcome.summary)
    return 0 if outcome.passed else 1


def cmd_slurm(args: argparse.Namespace) -> int:
    from chaos.supervise.slurm import sbatch_script

    script = sbatch_script(load_scenario(resolve(args.scenario, DEFAULT_SCENARIOS)), args.run_root, args.seed)
    if args.out is None:
        print(script, end="")
    else:
        Path(args.out).write_text(script)
        print(f"chaos: wrote {args.out}; submit it with sbatch from the project checkout")
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
    run.set_defaults(func=cmd_run)
    ls = sub.add_parser("list", help="list the scenario catalogue")
    ls.set_defaults(func=cmd_list)
    val = sub.add_parser("validate", help="validate scenario files (launches nothing)")
    val.add_argument("files", nargs="+")
    val.set_defaults(func=cmd_validate)
    cor = sub.add_parser("correlate", help="compare per-step losses of two runs (run folders or Megatron-style logs)")
    cor.add_argument("a")
    cor.add_argument("b")
    cor.add_argument("--tolerance", default="exact", help="exact, bf16, or an absolute tolerance (default: exact)")
    cor.set_defaults(func=cmd_correlate)
    jd = sub.add_parser("judge", help="judge a finished run folder again, from its files alone")
    jd.add_argument("run_dir")
    jd.set_defaults(func=cmd_judge)
    sl = sub.add_parser("slurm", help="write an sbatch script that runs a scenario on a Slurm cluster")
    sl.add_argument("scenario", help="a scenario file, or a name from the catalogue")
    sl.add_argument("--out", help="the script's file (default: print it)")
    sl.add_argument("--run-root", default="$SLURM_SUBMIT_DIR/chaos-runs", help="run folders' parent, on shared storage")
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
