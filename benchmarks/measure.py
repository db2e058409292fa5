"""Benchmark quantities computed from a run's events alone (docs/events.md), beside chaos.judge.timeline's metrics.

Pure functions of the ordered event list, so tests can hand-build events with chosen ``mono`` stamps.
chaos.judge.timeline fixes what detect and recover mean; these functions only split those spans into parts and
add the costs the verdicts do not need (start-up, step time, checkpoint stalls, recomputed time).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from chaos.judge.timeline import Metrics

Event = dict[str, Any]

WARMUP_STEPS = 3
"""Rank-0 steps left out of step-time medians: the first steps pay allocation and autograd warm-up."""


@dataclass(frozen=True)
class RecoveryBreakdown:
    """Fault → first step after the restart, in consecutive parts that sum to time_to_recover."""

    detect: float
    teardown: float
    """Detection → the launcher's restart line (in-process: → the next iteration's run_start)."""
    rendezvous_import: float
    """Restart line → the new attempt's run_start: process spawn, imports, rendezvous, process group."""
    build: float
    """run_start → the checkpoint load begins: model, optimizer, components (FT client, injector)."""
    checkpoint_load: float
    first_step: float
    """Checkpoint loaded → the first step completed."""

    @property
    def total(self) -> float:
        return self.detect + self.teardown + self.rendezvous_import + self.build + self.checkpoint_load + self.first_step


@dataclass(frozen=True)
class StartCost:
    """The bare cost of starting the job: launch → first step of the first attempt (rank 0)."""

    launch_to_run_start: float
    run_start_to_first_step: float

    @property
    def total(self) -> float:
        return self.launch_to_run_start + self.run_start_to_first_step


@dataclass(frozen=True)
class TimeSplit:
    """A whole run, first launch → last launcher exit, in parts that sum to its wall time: where a scenario's
    time goes (issue 18)."""

    wall: float
    attempts: int
    startup: float
    """Each attempt's start (a launch, the launcher's restart line, or the end of the attempt before, in
    process) → its rank-0 run_start: process spawn, Python and torch imports, rendezvous, process group; after
    a restart line also the launcher stopping the old workers (a SIGSTOPped rank ignores SIGTERM until the
    launcher's SIGKILL, twice its ``--term-timeout`` later under NVRx 0.4)."""
    build: float
    """Each attempt's run_start → its first step: components, model, DDP, optimizer, checkpoint load."""
    steps: float
    """Rank 0's own step times, summed."""

    @property
    def waits(self) -> float:
        """The rest: detection and its timeouts, teardown, saves, exits, the launcher's own end."""
        return self.wall - self.startup - self.build - self.steps


def time_split(events: list[Event]) -> TimeSplit | None:
    """The run's :class:`TimeSplit` from its ordered events; None for a run that never launched."""
    starts = [e["mono"] for e in events if e["rank"] < 0 and e["event"] in ("launch", "restart")]
    if not starts:
        return None
    ends = [e["mono"] for e in events if e["rank"] < 0 and e["event"] == "launcher_exit"]
    startup = build = 0.0
    attempts = sorted({e["attempt"] for e in events if _rank0("run_start")(e)})
    for attempt in attempts:
        run_start = _first(events, _rank0("run_start", attempt=attempt))
        before = [t for t in starts if t <= run_start["mono"]]
        before += [e["mono"] for e in events if e["rank"] == 0 and e["attempt"] < attempt and e["mono"] <= run_start["mono"]]
        startup += run_start["mono"] - max(before, default=run_start["mono"])
        step = _first(events, _rank0("step", attempt=attempt))
        build += 0.0 if step is None else step["mono"] - (step.get("step_time") or 0.0) - run_start["mono"]
    steps = sum(e["step_time"] for e in events if _rank0("step")(e) and e.get("step_time") is not None)
    end = max(ends) if ends else events[-1]["mono"]
    return TimeSplit(end - starts[0], len(attempts), startup, build, steps)


def _first(events: list[Event], pred: Callable[[Event], bool]) -> Event | None:
    return next((e for e in events if pred(e)), None)


def _rank0(name: str, attempt: int | None = None, after_attempt: int | None = None) -> Callable[[Event], bool]:
    def pred(e: Event) -> bool:
        if e["event"] != name or e["rank"] != 0:
            return False
        if attempt is not None and e["attempt"] != attempt:
            return False
        return after_attempt is None or e["attempt"] > after_attempt

    return pred


def recovery_breakdown(events: list[Event], metrics: Metrics) -> RecoveryBreakdown | None:
    """Split the first fault's recovery at the events that mark each phase; None when it did not recover."""
    if metrics.fault_mono is None or metrics.detect_mono is None or metrics.recover_mono is None:
        return None
    attempt = metrics.fault_attempt or 0
    start = _first(events, _rank0("run_start", after_attempt=attempt))
    if start is None:
        return None
    restart = _first(events, lambda e: e["event"] == "restart" and e["rank"] < 0 and e["mono"] >= metrics.detect_mono)
    restart_mono = start["mono"] if restart is None else min(restart["mono"], start["mono"])
    load = _first(events, _rank0("checkpoint_load", after_attempt=attempt))
    load_end = start["mono"] if load is None else load["mono"]
    load_s = 0.0 if load is None else float(load["seconds"])
    return RecoveryBreakdown(
        detect=metrics.detect_mono - metrics.fault_mono,
        teardown=restart_mono - metrics.detect_mono,
        rendezvous_import=start["mono"] - restart_mono,
        build=load_end - load_s - start["mono"],
        checkpoint_load=load_s,
        first_step=metrics.recover_mono - load_end,
    )


def start_cost(events: list[Event]) -> StartCost | None:
    """Launch → rank 0's run_start → its first step, in the first attempt."""
    launch = _first(events, lambda e: e["event"] == "launch" and e["rank"] < 0)
    start = _first(events, _rank0("run_start", attempt=0))
    step = _first(events, _rank0("step", attempt=0))
    if launch is None or start is None or step is None:
        return None
    return StartCost(start["mono"] - launch["mono"], step["mono"] - start["mono"])


def median_step_time(events: list[Event]) -> float | None:
    """Median rank-0 `step_time` of the first attempt, warm-up steps left out."""
    times = [e["step_time"] for e in events if _rank0("step", attempt=0)(e)][WARMUP_STEPS:]
    return statistics.median(times) if times else None


def save_stall(events: list[Event]) -> float | None:
    """Median extra time between the two rank-0 steps around a checkpoint save, over the run's usual gap.

    A sync save stalls training for its whole write; an async one only for staging the state, so the
    ratio of the two says how much of a save async saving hides.
    """
    steps = [e for e in events if _rank0("step", attempt=0)(e)]
    begins = [e["mono"] for e in events if _rank0("checkpoint_save_begin", attempt=0)(e)]
    gaps = [(a["mono"], b["mono"]) for a, b in pairwise(steps)]
    with_save = [b - a for a, b in gaps if any(a < t < b for t in begins)]
    without = [b - a for a, b in gaps[WARMUP_STEPS:] if not any(a < t < b for t in begins)]
    if not with_save or not without:
        return None
    return max(0.0, statistics.median(with_save) - statistics.median(without))


def save_seconds(events: list[Event]) -> float | None:
    """Median `seconds` of rank 0's completed saves (for async: begin → finalized)."""
    seconds = [e["seconds"] for e in events if _rank0("checkpoint_save_end")(e)]
    return statistics.median(seconds) if seconds else None


def recomputed_seconds(events: list[Event], metrics: Metrics) -> float | None:
    """Wall time of the failed attempt between the step resumed from and the last step before the fault:
    the work the restart computed again (saves inside that span included)."""
    if metrics.resumed_from_step is None or metrics.fault_attempt is None:
        return None
    steps = {e["iteration"]: e for e in events if _rank0("step", attempt=metrics.fault_attempt)(e)}
    if not steps:
        return None
    last = steps[max(steps)]
    resumed = steps.get(metrics.resumed_from_step)
    begin = resumed["mono"] if resumed else steps[min(steps)]["mono"] - steps[min(steps)]["step_time"]
    return max(0.0, last["mono"] - begin)
