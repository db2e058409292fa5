"""The measurements of issues 7 and 18, each a function from the point runner to table rows.

A row is a flat mapping (str → number, str or None): the markdown table and the JSON file show the same
rows. Numbers are medians over a point's runs; ratios are taken between points measured in the same
benchmark run, side by side, because on a shared 2-core machine only ratios travel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import jobs, measure, points
from benchmarks import startup as worker_startup
from benchmarks.runs import PointRunner, Sample, median_of

Row = dict[str, Any]


@dataclass(frozen=True)
class Grid:
    """What to measure; ``quick`` is the smoke subset the unit test runs."""

    timeouts: tuple[float, ...] = (2.0, 4.0)
    intervals: tuple[float, ...] = (0.5, 1.0)
    modes: tuple[str, ...] = ("heartbeat", "section")
    save_intervals: tuple[int, ...] = (2, 5, 10)
    worlds: tuple[int, ...] = (1, 2, 4)
    recovery: bool = True
    overhead: bool = True
    startup: bool = True
    mainjob: bool = True
    before: Path | None = None
    """A checkout of an earlier commit: the start-up, the main job and the suite also run there, side by side."""

    @classmethod
    def quick(cls) -> Grid:
        return cls(timeouts=(2.0,), intervals=(0.5,), modes=("heartbeat",), save_intervals=(5,), worlds=(2,),
                   recovery=False, overhead=False, startup=False, mainjob=False)

    def roots(self) -> list[Path]:
        """The checkouts to compare: the earlier one first, then this one."""
        return [*([self.before] if self.before else []), points.PROJECT_ROOT]


def _median_row(samples: list[Sample], values: Callable[[Sample], dict[str, float | None]]) -> dict[str, float | None]:
    keys = values(samples[0]).keys()
    return {k: median_of(samples, lambda s, k=k: values(s)[k]) for k in keys}


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def detection(runner: PointRunner, grid: Grid) -> list[Row]:
    runner.measure([points.hang(m, t, i) for m in grid.modes for t in grid.timeouts for i in grid.intervals])
    rows = []
    for mode in grid.modes:
        for timeout in grid.timeouts:
            for interval in grid.intervals:
                samples = runner.samples(points.hang(mode, timeout, interval))
                detect = median_of(samples, lambda s: s.metrics.time_to_detect_s)
                rows.append({"mode": mode, "timeout_s": timeout, "check_interval_s": interval, "detect_s": detect,
                             "detect_per_timeout": _ratio(detect, timeout),
                             "detected_by": samples[0].metrics.detected_by})
    return rows


def _recovery_parts(s: Sample) -> dict[str, float | None]:
    parts = measure.recovery_breakdown(s.events, s.metrics)
    values = asdict(parts) if parts else dict.fromkeys(measure.RecoveryBreakdown.__dataclass_fields__)
    return {"recover_s": s.metrics.time_to_recover_s, **values}


def _start_parts(s: Sample) -> dict[str, float | None]:
    cost = measure.start_cost(s.events)
    return {"start_s": cost and cost.total, "launch_to_run_start": cost and cost.launch_to_run_start,
            "run_start_to_first_step": cost and cost.run_start_to_first_step}


RECOVERY_SETUPS: tuple[tuple[str, str, Callable[[], dict[str, Any]]], ...] = (
    ("ft_launcher in-job restart", "rank_killed", lambda: points.kill("ft_launcher")),
    ("torchrun --max-restarts", "rank_killed", lambda: points.kill("torchrun")),
    ("ft_launcher in-job restart", "exception", lambda: points.exception(inprocess=False)),
    ("NVRx in-process restart (torchrun)", "exception", lambda: points.exception(inprocess=True)),
)


def recovery(runner: PointRunner, grid: Grid) -> list[Row]:
    """Each recovery, split into phases, beside the cost of starting the same job from nothing."""
    setups = RECOVERY_SETUPS if grid.recovery else RECOVERY_SETUPS[:1]
    runner.measure([point() for _, _, point in setups])
    rows = []
    for setup, fault, point in setups:
        samples = runner.samples(point())
        row = {"setup": setup, "fault": fault, **_median_row(samples, _recovery_parts), **_median_row(samples, _start_parts)}
        row["recover_per_start"] = _ratio(row["recover_s"], row["start_s"])
        rows.append(row)
    return rows


def _lost_parts(s: Sample) -> dict[str, float | None]:
    m = s.metrics
    return {"lost_steps": m.lost_steps, "resumed_from_step": m.resumed_from_step,
            "recomputed_s": measure.recomputed_seconds(s.events, m), "recover_s": m.time_to_recover_s,
            "save_s": measure.save_seconds(s.events), "stall_s": measure.save_stall(s.events),
            "steps_during_async_save": m.steps_during_async_save}


def lost_work(runner: PointRunner, grid: Grid) -> list[Row]:
    """Kill before step 10 with checkpoints every N steps, sync and async; the async stall over the sync one."""
    runner.measure([points.kill(save_interval=i, async_save=a) for i in grid.save_intervals for a in (False, True)])
    rows = []
    for interval in grid.save_intervals:
        by_mode = {}
        for async_save in (False, True):
            by_mode[async_save] = _median_row(runner.samples(points.kill(save_interval=interval, async_save=async_save)), _lost_parts)
        for async_save, row in by_mode.items():
            stall_ratio = _ratio(row["stall_s"], by_mode[False]["stall_s"]) if async_save else None
            rows.append({"save_interval": interval, "save": "async" if async_save else "sync", **row,
                         "stall_per_sync_stall": stall_ratio})
    return rows


def overhead(runner: PointRunner, grid: Grid) -> list[Row]:
    """Median step time of fault-free runs; ratios to plain torchrun."""
    if not grid.overhead:
        return []
    labels = {"plain": "torchrun, no chaos plan", "armed": "torchrun, chaos plan armed (never fires)",
              "flight_recorder": "torchrun, Flight Recorder armed (2000 entries)", "nvrx": "ft_launcher + NVRx heartbeats"}
    runner.measure([points.steady(kind) for kind in labels])
    steps = {kind: median_of(runner.samples(points.steady(kind)), lambda s: measure.median_step_time(s.events)) for kind in labels}
    starts = {kind: median_of(runner.samples(points.steady(kind)), lambda s: _start_parts(s)["start_s"]) for kind in labels}
    return [{"setup": label, "step_ms": None if steps[k] is None else steps[k] * 1000,
             "step_per_plain": _ratio(steps[k], steps["plain"]), "start_s": starts[k]} for k, label in labels.items()]


def scale(runner: PointRunner, grid: Grid) -> list[Row]:
    """Heartbeat detection (2 s timeout, 0.5 s checks) and ft_launcher kill recovery by world size."""
    runner.measure([p for w in grid.worlds for p in (points.hang("heartbeat", 2.0, 0.5, w), points.kill(world=w))])
    rows = []
    for world in grid.worlds:
        hang = runner.samples(points.hang("heartbeat", 2.0, 0.5, world))
        kill = runner.samples(points.kill(world=world))
        rows.append({"world_size": world, "detect_s": median_of(hang, lambda s: s.metrics.time_to_detect_s),
                     **_median_row(kill, _recovery_parts), "start_s": median_of(kill, lambda s: _start_parts(s)["start_s"])})
    return rows


def startup(runner: PointRunner, grid: Grid) -> list[Row]:
    """A worker's start-up and exit beside a bare ``import torch`` (benchmarks/startup.py)."""
    return worker_startup.startup(runner.out_dir, runner.reps, grid.before) if grid.startup else []


def mainjob(runner: PointRunner, grid: Grid) -> list[Row]:
    """The main job through nox, cold and warm, beside its floor (benchmarks/jobs.py)."""
    return jobs.main_job(grid.roots(), runner.reps, runner.out_dir / "mainjob") if grid.mainjob else []

