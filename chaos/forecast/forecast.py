"""A forecast: a profile's costs at the job's size, the failures it meets, and what the model makes of them.

The goodput band of the profile as measured, the save interval that buys the most back (the simulated curve
beside Young/Daly's value), and a what-if row for each alternative the profile measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from chaos.errors import BadInput
from chaos.forecast.model import Arrivals, Costs, Outcome, simulate, young_daly_s
from chaos.forecast.presets import Failures
from chaos.forecast.profile import CLASSES, ClassCost, Profile, SaveCost, require_classes


@dataclass(frozen=True)
class Job:
    """The job to forecast."""

    gpus: int
    gpus_per_node: int = 8
    days: float | None = None
    work_steps: int | None = None
    """A job of so many steps instead of so many days (a soak, replayed)."""
    save_interval: int | None = None
    """Steps between saves; None: the profile's."""
    replicas: int = 1000
    seed: int = 0

    @property
    def nodes(self) -> int:
        return max(1, math.ceil(self.gpus / self.gpus_per_node))

    def check(self) -> None:
        if self.gpus < 1 or self.gpus_per_node < 1:
            raise BadInput(f"--gpus and --gpus-per-node: must be >= 1, got {self.gpus} and {self.gpus_per_node}")
        if self.days is not None and not self.days > 0:
            raise BadInput(f"--days: must be a positive number, got {self.days:g}")
        if self.save_interval is not None and self.save_interval < 1:
            raise BadInput(f"--save-interval: must be >= 1 step, got {self.save_interval}")
        if self.replicas < 1:
            raise BadInput(f"--replicas: must be >= 1, got {self.replicas}")


@dataclass(frozen=True)
class Row:
    name: str
    description: str
    band: dict[str, float]


@dataclass(frozen=True)
class Forecast:
    job: Job
    failures: str
    outcome: Outcome
    interval: int
    curve: list[tuple[int, float]]
    """(interval in steps, mean goodput), for the candidate intervals."""
    best_interval: int
    young_daly_steps: float
    period_s: float
    what_if: list[Row] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "goodput": self.outcome.band(),
            "badput": self.outcome.badput_share(),
            "failures_mean": float(self.outcome.failures.mean()),
            "save_interval": {"steps": self.interval, "seconds": self.interval * self.period_s},
            "best_save_interval": {
                "steps": self.best_interval, "seconds": self.best_interval * self.period_s,
                "young_daly_steps": self.young_daly_steps, "young_daly_s": self.young_daly_steps * self.period_s,
            },
            "interval_curve": [{"steps": k, "seconds": k * self.period_s, "goodput": g} for k, g in self.curve],
            "what_if": [{"name": r.name, "description": r.description, **r.band} for r in self.what_if],
            "job": {"gpus": self.job.gpus, "nodes": self.job.nodes, "days": self.job.days, "replicas": self.job.replicas,
                    "seed": self.job.seed, "failures": self.failures},
        }


def startup_at(profile: Profile, nodes: int) -> float:
    """Start-up at `nodes`: interpolated in log(nodes) between the profile's sizes, extrapolated along the end
    segments beyond them (never below zero); the profile's own start-up when it gives fewer than two sizes."""
    points = sorted(profile.startup_scaling, key=lambda p: p.nodes)
    if len(points) < 2:
        return profile.startup_s
    xs = [math.log(p.nodes) for p in points]
    ys = [p.startup_s for p in points]
    x = math.log(nodes)
    i = 0 if x < xs[0] else len(xs) - 2 if x > xs[-1] else max(0, int(np.searchsorted(xs, x)) - 1)
    i = min(i, len(xs) - 2)
    slope = (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i]) if xs[i + 1] > xs[i] else 0.0
    return max(0.0, ys[i] + slope * (x - xs[i]))


def costs_of(profile: Profile, job: Job, classes: dict[str, ClassCost] | None = None, save: SaveCost | None = None,
             interval: int | None = None) -> Costs:
    """The model's costs: the profile's, start-up grown to the job's size (the relaunches by as much)."""
    classes = {**profile.classes, **(classes or {})}
    save = save or profile.save
    startup = startup_at(profile, job.nodes)
    grow = startup - profile.startup_s
    known = [classes.get(c) for c in CLASSES]
    pick = lambda attr: np.array([getattr(c, attr) if c else 0.0 for c in known], dtype=float)  # noqa: E731
    return Costs(
        step_s=profile.step_time_s, overhead_s=profile.step_overhead_s, startup_s=startup,
        interval=interval or job.save_interval or save.interval_steps, stall_s=save.stall_s,
        detect_s=pick("detect_s"), restart_s=np.maximum(pick("restart_s") + grow, 0.0), load_s=pick("load_s"),
        loses_progress=np.array([c.loses_progress if c else True for c in known]), shutdown_s=profile.shutdown_s,
    )


def run_forecast(profile: Profile, failures: Failures, job: Job) -> Forecast:
    job.check()
    require_classes(profile, failures.classes(), failures.name)
    arrivals = Arrivals.poisson(failures.job_rates(job.gpus, job.nodes))
    horizon = None if job.days is None else job.days * 86400.0
    sim = lambda costs: simulate(costs, arrivals, horizon_s=horizon, work_steps=job.work_steps,  # noqa: E731
                                 replicas=job.replicas, seed=job.seed)
    base = costs_of(profile, job)
    outcome = sim(base)
    rate = arrivals.total_rate
    yd_steps = young_daly_s(1.0 / rate, base.stall_s) / base.period_s if rate > 0 and base.stall_s > 0 else math.inf
    grid = candidate_intervals(int(base.interval), yd_steps)
    batch = simulate(replace(base, interval=np.repeat(np.array(grid, dtype=float), job.replicas)), arrivals, horizon_s=horizon,
                     work_steps=job.work_steps, replicas=len(grid) * job.replicas, seed=job.seed)
    by_interval = batch.goodput.reshape(len(grid), job.replicas)
    curve = list(zip(grid, (float(m) for m in by_interval.mean(axis=1)), strict=True))
    best = max(curve, key=lambda kg: kg[1])[0]
    rows = [Row("as measured", f"save every {base.interval} steps", outcome.band())]
    for name, alt in profile.alternatives.items():
        rows.append(Row(name, alt.description, sim(costs_of(profile, job, alt.classes, alt.save)).band()))
    if best != base.interval:
        g = by_interval[grid.index(best)]
        band = {"mean": float(g.mean()), "p10": float(np.percentile(g, 10)), "p90": float(np.percentile(g, 90))}
        rows.append(Row("best interval", f"save every {best} steps", band))
    return Forecast(job, failures.name, outcome, base.interval, curve, best, yd_steps, base.period_s, rows)


def candidate_intervals(current: int, young_daly_steps: float) -> list[int]:
    """The save intervals the curve is drawn at: the current one, and powers of two times Young/Daly's value
    (1/8x to 8x), in steps."""
    centre = young_daly_steps if math.isfinite(young_daly_steps) else current
    grid = {max(1, round(centre * 2.0 ** j)) for j in range(-3, 4)}
    return sorted(grid | {current})
