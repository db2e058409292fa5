"""The job's timeline, simulated: Monte Carlo over replicas, vectorised with numpy (docs/forecast.md, "The model").

A job is a sequence of attempts. The first starts after the program's start-up; each later one after its
failure's detection and relaunch, and begins with a checkpoint load. An attempt trains from its checkpoint,
saving every ``interval`` steps (a save stalls training ``stall_s``), until its failure arrives: failures
arrive as a Poisson process on the attempts' clock (each class at its own rate, the whole job's), so the
gap from an attempt's start to its failure is exponential. A failure throws away the work since the last
completed save (a class that saves on the fault, a preemption with a grace save, pays one save instead).
The job ends at the horizon (``horizon_s``: a job of D days) or when ``work_steps`` are done (a soak).

The loop runs once per failure, every replica at a time, so 1,000 replicas of a month at 16k GPUs is a few
hundred numpy passes (benchmarks/forecast.py measures it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from chaos.forecast.profile import CLASSES, FaultClass

BADPUT = (
    "PROGRAM_STARTUP", "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME", "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME",
    "WASTED_PROGRESS_FROM_DISRUPTION", "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION", "OTHER",
)
"""The badput categories reported, in the terms of Google's ml-goodput-measurement (its ``BadputType``)."""


@dataclass(frozen=True)
class Costs:
    """What the model needs of a profile, at the job's size (chaos/forecast/forecast.py makes it)."""

    step_s: float
    overhead_s: float
    startup_s: float
    interval: int | np.ndarray
    """Steps between saves; an array gives each replica its own (one batch draws a whole interval curve)."""
    stall_s: float
    detect_s: np.ndarray
    """Per class, in CLASSES order (and the same for the next three)."""
    restart_s: np.ndarray
    load_s: np.ndarray
    loses_progress: np.ndarray
    shutdown_s: float = 0.0
    """The job's end after its last step (the launcher's exit), for a job of so many steps."""

    @property
    def period_s(self) -> float:
        return self.step_s + self.overhead_s


@dataclass(frozen=True)
class Arrivals:
    """Where failures come from: per-class rates (per second, the whole job), at most ``limit`` of them and none
    once the attempts' clock passes ``until_s`` (a soak's duration_s); or, for a replay, the gaps and classes a
    real run had (one replica)."""

    rates: np.ndarray
    limit: int | None = None
    until_s: float | None = None
    gaps: tuple[float, ...] | None = None
    classes: tuple[FaultClass, ...] | None = None

    @classmethod
    def poisson(cls, rates: dict[FaultClass, float], limit: int | None = None, until_s: float | None = None) -> Arrivals:
        if any(r < 0 for r in rates.values()):
            raise ValueError("a failure rate is negative")
        return cls(np.array([rates.get(c, 0.0) for c in CLASSES]), limit, until_s)

    @classmethod
    def replay(cls, gaps: Sequence[float], classes: Sequence[FaultClass]) -> Arrivals:
        return cls(np.zeros(len(CLASSES)), limit=len(gaps), gaps=tuple(gaps), classes=tuple(classes))

    @property
    def total_rate(self) -> float:
        return float(self.rates.sum())


@dataclass(frozen=True)
class Outcome:
    """Per replica: goodput, wall seconds, failures, and seconds per badput category."""

    goodput: np.ndarray
    wall_s: np.ndarray
    failures: np.ndarray
    badput_s: dict[str, np.ndarray]

    def band(self) -> dict[str, float]:
        g = self.goodput
        return {"mean": float(g.mean()), "p10": float(np.percentile(g, 10)), "p90": float(np.percentile(g, 90))}

    def badput_share(self) -> dict[str, float]:
        """Each category's mean share of the wall time."""
        return {k: float((v / self.wall_s).mean()) for k, v in self.badput_s.items()}


def simulate(
    costs: Costs, arrivals: Arrivals, *, horizon_s: float | None = None, work_steps: int | None = None,
    replicas: int = 1000, seed: int = 0,
) -> Outcome:
    """The job `replicas` times; exactly one of horizon_s and work_steps ends it."""
    if (horizon_s is None) == (work_steps is None):
        raise ValueError("give exactly one of horizon_s and work_steps")
    if arrivals.gaps is not None:
        replicas = 1
    rng = np.random.default_rng(seed)
    n = replicas
    horizon = np.inf if horizon_s is None else horizon_s
    work = np.inf if work_steps is None else float(work_steps)
    p, k, s = costs.period_s, costs.interval, costs.stall_s
    t = np.full(n, min(costs.startup_s, horizon))  # the wall clock
    step = np.zeros(n)  # steps done and kept (the last checkpoint, or all of them once the job ends)
    load = np.zeros(n)  # the load this attempt begins with
    active = t < horizon
    bad = {name: np.zeros(n) for name in BADPUT}
    bad["PROGRAM_STARTUP"] += t
    useful = np.zeros(n)
    failures = np.zeros(n, dtype=int)
    clock = np.zeros(n)  # the attempts' clock: the sum of the gaps so far
    until = np.inf if arrivals.until_s is None else arrivals.until_s
    total = arrivals.total_rate
    probs = arrivals.rates / total if total > 0 else None
    i = 0
    with np.errstate(invalid="ignore"):  # an attempt without a failure trains for ever in arithmetic: it ends by `ends`
        while active.any():
            gap, cls = _next(arrivals, i, n, rng, total, probs)
            fails = active & np.isfinite(gap) & (arrivals.limit is None or i < arrivals.limit) & (clock + gap <= until)
            gap = np.where(fails, gap, np.inf)
            # This attempt's training time: to its failure, the horizon, or the end of the work.
            span = np.minimum(gap, horizon - t)
            restore = np.minimum(load, span)
            train = span - restore
            done_steps, saves, saved_at = _progress(step, train, p, k, s)
            left = work - step
            finish = _time_for(step, left, p, k, s)  # time to finish the work from here, saves included
            ends = active & (restore + finish <= span)
            cut = active & ~ends & ~(gap <= horizon - t)  # the horizon came first
            hit = active & ~ends & ~cut
            # A job that finishes or reaches the horizon keeps every step it made.
            kept = np.where(ends, left, np.where(cut, done_steps, 0.0))
            spent_save = np.where(ends, _saves_between(step, step + left, k) * s, saves * s)
            # A failure keeps the steps up to its last completed save (or all of them, saved on the fault).
            loses = costs.loses_progress[cls]
            kept_hit = np.where(loses, saved_at - step, done_steps)
            kept = np.where(hit, kept_hit, kept)
            elapsed = np.where(ends, restore + finish + costs.shutdown_s, span)
            bad["UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME"] += np.where(active, restore, 0.0)
            bad["UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"] += np.where(active, spent_save, 0.0) + np.where(hit & ~loses, s, 0.0)
            wasted = elapsed - restore - spent_save - kept * p  # a finished job's: its shutdown
            bad["WASTED_PROGRESS_FROM_DISRUPTION"] += np.where(hit, wasted, 0.0)
            bad["OTHER"] += np.where(active, kept * costs.overhead_s + np.where(hit, 0.0, np.maximum(wasted, 0.0)), 0.0)
            useful += np.where(active, kept * costs.step_s, 0.0)
            step += np.where(active, kept, 0.0)
            recovery = np.where(hit, costs.detect_s[cls] + costs.restart_s[cls] + np.where(loses, 0.0, s), 0.0)
            recovery = np.where(hit, np.minimum(recovery, np.maximum(horizon - t - elapsed, 0.0)), 0.0)  # the horizon cuts it
            bad["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"] += recovery - np.where(hit & ~loses, np.minimum(s, recovery), 0.0)
            t = t + np.where(active, elapsed, 0.0) + recovery
            load = np.where(hit, costs.load_s[cls], load)
            failures += hit
            clock += np.where(hit, gap, 0.0)
            active = hit & (t < horizon)
            i += 1
    wall = t
    return Outcome(np.divide(useful, wall, out=np.zeros(n), where=wall > 0), wall, failures, bad)


def _next(arrivals: Arrivals, i: int, n: int, rng: np.random.Generator, total: float,
          probs: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The i-th attempt's gap to its failure, and the failure's class, per replica."""
    if arrivals.gaps is not None:
        if i >= len(arrivals.gaps):
            return np.full(n, np.inf), np.zeros(n, dtype=int)
        return np.full(n, arrivals.gaps[i]), np.full(n, CLASSES.index(arrivals.classes[i]))
    if probs is None:
        return np.full(n, np.inf), np.zeros(n, dtype=int)
    return rng.exponential(1.0 / total, n), rng.choice(len(CLASSES), n, p=probs)


def _progress(step: np.ndarray, train: np.ndarray, p: float, k: int | np.ndarray, s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """From `step`, training for `train` seconds: steps done, saves completed, and the step of the last completed
    save (`step` itself when none completed). Saves happen after every step that is a multiple of k."""
    to_first = np.ceil((step + 1) / k) * k - step  # steps to the first save (a save at `step` itself is done)
    t_first = to_first * p + s
    cycle = k * p + s
    after = np.maximum(train - t_first, 0.0)
    saves = np.where(train >= t_first, 1 + np.floor(after / cycle), 0.0)
    saved_at = np.where(saves > 0, step + to_first + (saves - 1) * k, step)
    # Time left after the last completed save (or from the start when none): steps of it, at most to the next save.
    since = np.where(saves > 0, after - (saves - 1) * cycle, train)
    room = np.where(saves > 0, k, to_first)
    done = saved_at - step + np.minimum(np.floor(since / p), room)
    return done, saves, saved_at


def _saves_between(a: np.ndarray, b: np.ndarray, k: int | np.ndarray) -> np.ndarray:
    """Saves after steps in (a, b]: the multiples of k there (a job saves at its last step only if it is one)."""
    return np.floor(b / k) - np.floor(a / k)


def _time_for(step: np.ndarray, left: np.ndarray, p: float, k: int | np.ndarray, s: float) -> np.ndarray:
    """Seconds to do `left` more steps from `step`, saves included (inf for unbounded work)."""
    with np.errstate(invalid="ignore"):
        out = left * p + _saves_between(step, step + left, k) * s
    return np.where(np.isfinite(left), out, np.inf)


def young_daly_s(mtbf_s: float, save_cost_s: float) -> float:
    """Young/Daly's first-order optimum checkpoint interval, sqrt(2 * MTBF * C), in seconds."""
    return float(np.sqrt(2.0 * mtbf_s * save_cost_s))
