"""`chaos forecast profile RUN_DIR... [-o FILE]` and `chaos forecast PROFILE --gpus N --days D ...`
(docs/forecast.md). Bad input is chaos.errors.BadInput (or a damaged run folder's RunFolderError): one line,
exit 2, printed by chaos.cli.main. numpy and the model are imported when the command runs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from chaos.errors import BadInput


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None


def add_parser(sub: argparse._SubParsersAction) -> None:
    fc = sub.add_parser(
        "forecast", help="forecast goodput at scale from a cost profile; `forecast profile RUN_DIR...` builds one",
        description="chaos forecast profile RUN_DIR... [-o profile.yaml]: a cost profile from judged run folders. "
        "chaos forecast PROFILE --gpus N --days D (--failures PRESET | --mtbf-gpu-hours H): the forecast. "
        "Exit 0, or 2 on bad input.",
    )
    fc.add_argument("profile", help="a profile file (YAML or JSON), or the word `profile` to build one")
    fc.add_argument("run_dirs", nargs="*", help="with `profile`: judged run folders")
    fc.add_argument("-o", "--output", help="with `profile`: write the profile here (.yaml or .json) instead of stdout")
    fc.add_argument("--gpus", type=int, help="the job's GPUs")
    fc.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default: 8)")
    fc.add_argument("--days", type=_number, help="the job's length in days")
    how = fc.add_mutually_exclusive_group()
    how.add_argument("--failures", help="a failure preset: llama3-16k")
    how.add_argument("--mtbf-gpu-hours", type=_number, help="a plain MTBF per GPU, in hours (failures of class process_death)")
    fc.add_argument("--save-interval", type=int, help="steps between checkpoint saves (default: the profile's)")
    fc.add_argument("--replicas", type=int, default=1000, help="Monte Carlo replicas (default: 1000)")
    fc.add_argument("--seed", type=int, default=0, help="the simulation's seed (default: 0)")
    fc.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    fc.add_argument("--markdown", help="also write the report as markdown to this file")
    fc.add_argument("--png", help="also draw goodput against the save interval, and the badput bars, to this PNG")
    fc.set_defaults(func=cmd_forecast)


def cmd_forecast(args: argparse.Namespace) -> int:
    if args.profile == "profile":
        return _build(args)
    if args.run_dirs:
        raise BadInput(f"forecast: unexpected arguments after the profile: {' '.join(args.run_dirs)}")
    return _forecast(args)


def _build(args: argparse.Namespace) -> int:
    from chaos.forecast.measure import build_profile
    from chaos.forecast.profile import save_profile

    if not args.run_dirs:
        raise BadInput("forecast profile: give one or more judged run folders")
    text = save_profile(build_profile(args.run_dirs), args.output)
    print(f"chaos: wrote {args.output}" if args.output else text, end="\n" if args.output else "")
    return 0


def _forecast(args: argparse.Namespace) -> int:
    from chaos.forecast.forecast import Job, run_forecast
    from chaos.forecast.presets import mtbf_per_gpu, preset
    from chaos.forecast.profile import load_profile
    from chaos.forecast.report import markdown, plot

    if args.gpus is None or args.days is None:
        raise BadInput("forecast: give --gpus N and --days D (and --failures PRESET or --mtbf-gpu-hours H)")
    if args.failures is None and args.mtbf_gpu_hours is None:
        raise BadInput("forecast: give --failures PRESET (llama3-16k) or --mtbf-gpu-hours H")
    failures = preset(args.failures) if args.failures is not None else mtbf_per_gpu(args.mtbf_gpu_hours)
    profile = load_profile(args.profile)
    job = Job(args.gpus, args.gpus_per_node, days=args.days, save_interval=args.save_interval,
              replicas=args.replicas, seed=args.seed)
    forecast = run_forecast(profile, failures, job)
    text = markdown(forecast)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.png:
        plot(forecast, args.png)
    if args.json:
        print(json.dumps(forecast.to_json(), indent=2))
    else:
        sys.stdout.write(text)
    return 0
