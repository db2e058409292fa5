"""`python -m benchmarks forecast`: the forecast checked against soaks it never saw, and its speed.

1. The catalogue's short single-fault runs (rank_killed, rank_hung) are run and judged; their profile is the
   *blind* profile (chaos forecast profile of those folders).
2. scenarios/soak/soak_long.yaml runs once per save interval, all with one seed (one fault schedule), judged:
   the judge's goodput is the measured one.
3. Per soak: *replay* (the model with the soak's own costs, fed its realised fault times) must come within
   3 points of the measured goodput (shown also with the blind profile's costs); *blind* (the forecast of
   the soak's failure process, 1,000 replicas) must put it inside p10-p90. The best of the intervals by
   the forecast must be the best measured. `--async-intervals` adds soaks with async saves (and
   async_save_every_step to the catalogue, for the async_save alternative's stall).
4. Speed: a 30-day forecast at 16,384 GPUs with 1,000 replicas, on the shipped Megatron profile, beside 100.

Writes OUT/forecast.json and OUT/forecast.md (docs/records/2026-12-06-forecast.md holds one run's).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.runs import BenchmarkFailed
from chaos.forecast.forecast import Job, costs_of, run_forecast
from chaos.forecast.measure import build_profile
from chaos.forecast.model import Arrivals, simulate
from chaos.forecast.presets import preset
from chaos.forecast.profile import CLASS_OF_FAULT, FaultClass, Profile, load_profile
from chaos.schema.loader import load_scenario
from chaos.supervise.runner import run_scenario
from runlog import names
from runlog.reader import read_events

ROOT = Path(__file__).resolve().parent.parent
SOAK = ROOT / "scenarios" / "soak" / "soak_long.yaml"
CATALOGUE = ("rank_killed", "rank_hung")
ASYNC_CATALOGUE = ("async_save_every_step",)
"""Its async saves price the blind profile's async_save alternative (its crash prices nothing: not the base's)."""
MEGATRON = ROOT / "chaos" / "forecast" / "profiles" / "megatron.yaml"
REPLAY_POINTS = 0.03


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks forecast", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("chaos-runs/bench-forecast"))
    p.add_argument("--intervals", default="20,200,2000", help="save intervals of the soaks, in steps (default: %(default)s)")
    p.add_argument("--async-intervals", default="", help="save intervals of soaks with async saves (default: none)")
    p.add_argument("--seed", type=int, default=None, help="the soaks' seed (default: the scenario's)")
    p.add_argument("--catalogue-runs", nargs="*", type=Path, help="judged run folders for the blind profile (default: run them)")
    p.add_argument("--soak-runs", nargs="*", type=Path, help="judged soak folders to compare (default: run them)")
    p.add_argument("--speed-only", action="store_true", help="only the speed section")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    try:
        run(parse_args(argv))
    except BenchmarkFailed as e:
        print(f"bench: error: {e}", file=sys.stderr)
        return 1
    return 0


def run(args: argparse.Namespace) -> None:
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"speed": speed()}
    print(f"bench: speed {results['speed']}")
    if not args.speed_only:
        names_ = CATALOGUE + (ASYNC_CATALOGUE if args.async_intervals else ())
        catalogue = args.catalogue_runs or [_run(load_scenario(ROOT / "scenarios" / f"{n}.yaml"), out / "runs") for n in names_]
        profile = build_profile(catalogue)
        (out / "blind-profile.json").write_text(json.dumps(profile.model_dump(mode="json"), indent=1))
        settings = [(int(k), False) for k in args.intervals.split(",") if k] + [(int(k), True) for k in args.async_intervals.split(",") if k]
        soaks = args.soak_runs or [_run(_soak(k, is_async, args.seed), out / "runs") for k, is_async in settings]
        results["catalogue"] = [str(p) for p in catalogue]
        results["soaks"] = [compare(profile, Path(d)) for d in soaks]
        sync = [r for r in results["soaks"] if not r["async"]]  # the intervals of one fault schedule, sync saves
        best_measured = max(sync, key=lambda r: r["measured"])["interval"]
        best_forecast = max(sync, key=lambda r: r["blind"]["mean"])["interval"]
        results["best_interval"] = {"measured": best_measured, "forecast": best_forecast, "agree": best_measured == best_forecast}
    (out / "forecast.json").write_text(json.dumps(results, indent=1))
    (out / "forecast.md").write_text(markdown(results))
    print((out / "forecast.md").read_text())


def _soak(interval: int, is_async: bool, seed: int | None) -> Any:
    base = load_scenario(SOAK)
    trainer = {**base.trainer, "checkpoint.save_interval": interval, **({"checkpoint.async_save": True} if is_async else {})}
    return base.replace(trainer=trainer, name=f"soak_long_{'async' if is_async else 'i'}{interval}",
                        seed=base.seed if seed is None else seed)


def _run(scenario: Any, out: Path) -> Path:
    start = time.monotonic()
    outcome = run_scenario(scenario, out, progress=None)
    print(f"bench: {scenario.name}: {outcome.journal['status']} in {time.monotonic() - start:.0f} s ({outcome.run_dir})")
    return outcome.run_dir


def compare(profile: Profile, run_dir: Path) -> dict[str, Any]:
    """A judged soak against the model, with its own interval and length. Replay: the soak's own costs (its
    profile) and its realised fault times, the model's accounting checked (also shown with the blind profile's
    costs); blind: the catalogue's profile and the soak's failure process, 1,000 replicas."""
    journal = json.loads((run_dir / "journal.json").read_text())
    scenario = load_scenario(run_dir / "scenario.yaml", named=False)
    soak = next(f for f in scenario.faults if f.type == "soak")
    interval = scenario.config.checkpoint.save_interval
    work = scenario.config.train.train_iters
    job = Job(gpus=scenario.world_size, gpus_per_node=scenario.world_size, work_steps=work, save_interval=interval)
    is_async = scenario.config.checkpoint.async_save
    if is_async and "async_save" not in profile.alternatives:
        raise BenchmarkFailed(f"{run_dir}: an async soak needs an async catalogue run in the blind profile")
    costs = costs_of(profile, job, save=profile.alternatives["async_save"].save if is_async else None)
    gaps, classes = realised(run_dir, journal["plan"])
    replay = simulate(costs_of(build_profile([run_dir]), job), Arrivals.replay(gaps, classes), work_steps=work)
    replay_blind = simulate(costs, Arrivals.replay(gaps, classes), work_steps=work)
    kinds = {CLASS_OF_FAULT[k] for k in soak.kinds}
    rates: dict[FaultClass, float] = {c: sum(CLASS_OF_FAULT[k] == c for k in soak.kinds) / len(soak.kinds) / soak.mtbf_s for c in kinds}
    arrivals = Arrivals.poisson(rates, limit=soak.count, until_s=soak.duration_s)
    blind = simulate(costs, arrivals, work_steps=work, replicas=1000, seed=scenario.seed)
    measured = journal["metrics"]["goodput"]
    band = blind.band()
    return {
        "run_dir": str(run_dir), "interval": interval, "async": is_async, "seed": scenario.seed, "status": journal["status"],
        "faults": len(gaps), "wall_s": journal["metrics"]["wall_s"], "measured": measured,
        "replay": float(replay.goodput[0]), "replay_ok": abs(float(replay.goodput[0]) - measured) <= REPLAY_POINTS,
        "replay_blind_costs": float(replay_blind.goodput[0]),
        "blind": band, "blind_ok": band["p10"] <= measured <= band["p90"],
        "gaps_s": [round(g, 2) for g in gaps], "classes": classes,
    }


def realised(run_dir: Path, plan: list[dict[str, Any]]) -> tuple[list[float], list[FaultClass]]:
    """Each fault's gap on the model's clock: from its attempt's start (training start; a later attempt's load
    start) to the fault, in the order they struck; and each fault's class (its kind's)."""
    kind_of = {p["fault_id"]: p.get("kind") or p["type"] for p in plan}
    events = read_events(run_dir)
    gaps, classes = [], []
    for fault in (e for e in events if e["event"] == names.FAULT_INJECTED):
        attempt = fault["attempt"]
        steps = [e for e in events if e["event"] == names.STEP and e["rank"] == 0 and e["attempt"] == attempt]
        loads = [e for e in events if e["event"] == names.CHECKPOINT_LOAD and e["rank"] == 0 and e["attempt"] == attempt]
        train_start = steps[0]["mono"] - steps[0]["step_time"] if steps else fault["mono"]
        load = loads[0]["seconds"] if loads else 0.0
        gaps.append(max(0.0, fault["mono"] - train_start) + load)
        classes.append(CLASS_OF_FAULT[kind_of.get(fault.get("fault_id"), fault["fault"])])
    return gaps, classes


def speed() -> dict[str, float]:
    """Seconds for the whole forecast (goodput, interval curve, what-ifs) at 16,384 GPUs for 30 days with
    llama3-16k, at 1,000 replicas beside 100: wall and CPU seconds (the wall is noisy on a shared machine)."""
    profile = load_profile(MEGATRON)
    out = {}
    for replicas in (100, 1000):
        start, cpu = time.perf_counter(), time.process_time()
        run_forecast(profile, preset("llama3-16k"), Job(16_384, days=30, replicas=replicas))
        out[f"replicas_{replicas}_wall_s"] = round(time.perf_counter() - start, 3)
        out[f"replicas_{replicas}_cpu_s"] = round(time.process_time() - cpu, 3)
    return out


def markdown(results: dict[str, Any]) -> str:
    lines = ["# python -m benchmarks forecast", "", f"Speed (16,384 GPUs, 30 days, llama3-16k, whole forecast): {results['speed']}", ""]
    if "soaks" in results:
        lines += [
            "| save interval | seed | faults | wall (s) | measured | replay | within 3 pts | replay, blind costs | blind mean | blind p10-p90 | inside |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in results["soaks"]:
            b = r["blind"]
            lines.append(f"| {r['interval']}{' async' if r['async'] else ''} | {r['seed']} | {r['faults']} | {r['wall_s']:.0f} | {r['measured']:.3f} | {r['replay']:.3f} | "
                         f"{'yes' if r['replay_ok'] else 'NO'} | {r['replay_blind_costs']:.3f} | {b['mean']:.3f} | {b['p10']:.3f}-{b['p90']:.3f} | {'yes' if r['blind_ok'] else 'NO'} |")
        best = results["best_interval"]
        lines += ["", f"Best interval: measured {best['measured']}, forecast {best['forecast']} ({'agree' if best['agree'] else 'DISAGREE'})."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
