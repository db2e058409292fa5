"""What happened in a run, and how fast it recovered, computed from its events alone.

Pure functions of the event list that ``trainer.events.read_events`` returns, so a run folder can be judged
again later and tests can hand-build events with chosen ``mono`` stamps. docs/events.md names the events;
the metric meanings (detect, recover, lost steps, goodput) are fixed here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.events import read_events

Event = dict[str, Any]

RUNNER_DETECTIONS = frozenset({"ft_timeout", "worker_failed", "restart"})
"""Runner events that show the launcher acted on a fault."""
RANK_DETECTIONS = frozenset({"signal_received", "rerun"})
"""Rank events that show the trainer acted on a fault (plus flagged straggler reports and foreign exits)."""

_RANK0_MARKS = frozenset({"run_start", "resume", "checkpoint_save_end", "checkpoint_load", "checkpoint_corrupt"})
_ANY_MARKS = frozenset(
    {"launch", "fault_injected", "signal_sent", "launcher_exit", "leftover", "deadline"}
    | RUNNER_DETECTIONS
    | RANK_DETECTIONS
)
_INFO_FIELDS = (
    "iteration", "fault", "target_rank", "reason", "code", "error", "signal", "path",
    "local_rank", "exitcode", "pids", "seconds", "flagged", "state",
)


@dataclass(frozen=True)
class Mark:
    """A notable event, ``t`` seconds after the run's first event, with its telling fields in ``info``."""

    t: float
    event: str
    rank: int
    attempt: int
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """A rank-0 step as one attempt computed it; a step recomputed after a restart appears once per attempt."""

    iteration: int
    loss: float
    attempt: int
    t: float
    step_time: float


@dataclass(frozen=True)
class Timeline:
    """The run at a glance: notable events and every rank-0 step, in order. Times are seconds since ``start_mono``."""

    start_mono: float
    marks: tuple[Mark, ...]
    steps: tuple[Step, ...]
    versions: dict[str, Any]


@dataclass(frozen=True)
class Metrics:
    """Measured outcome of a run. Fault fields are None without a fault; recovery fields without a later attempt."""

    exit_code: int | None
    restarts: int | None
    completed_steps: int
    wall_s: float | None
    goodput: float | None
    losses: dict[int, float]
    checkpoints_saved: tuple[int, ...]
    checkpoints_corrupt: tuple[str, ...]
    attempt_starts: tuple[float, ...]
    fault_mono: float | None = None
    fault_attempt: int | None = None
    fault_rank: int | None = None
    detect_mono: float | None = None
    detected_by: str | None = None
    time_to_detect_s: float | None = None
    recover_mono: float | None = None
    time_to_recover_s: float | None = None
    resumed_from_step: int | None = None
    lost_steps: int | None = None


def load_run(run_dir: str | Path) -> tuple[Timeline, Metrics]:
    """Read a run folder's events once and compute both views of them."""
    events = read_events(run_dir)
    return build_timeline(events), compute_metrics(events)


def build_timeline(events: Iterable[Event]) -> Timeline:
    ordered = _ordered(events)
    start = ordered[0]["mono"] if ordered else 0.0
    marks = tuple(_mark(e, start) for e in ordered if _is_notable(e))
    steps = tuple(_step(e, start) for e in ordered if e["event"] == "step" and e["rank"] == 0)
    first_start = next((e for e in ordered if e["event"] == "run_start"), {})
    return Timeline(start, marks, steps, dict(first_start.get("versions") or {}))


def compute_metrics(events: Iterable[Event]) -> Metrics:
    ordered = _ordered(events)
    lineage = final_lineage(ordered)
    wall = _wall_seconds(ordered)
    useful = sum(e.get("step_time", 0.0) for e in lineage.values())
    fault_at = next((i for i, e in enumerate(ordered) if e["event"] == "fault_injected"), None)
    return Metrics(
        exit_code=_last(ordered, "launcher_exit", "code"),
        restarts=max((e["attempt"] for e in ordered if e["rank"] >= 0), default=None),
        completed_steps=max((e["iteration"] for e in ordered if e["event"] == "step"), default=0),
        wall_s=wall,
        goodput=useful / wall if wall else None,
        losses={i: e["loss"] for i, e in lineage.items()},
        checkpoints_saved=tuple(e["iteration"] for e in ordered if _on_rank0(e, "checkpoint_save_end")),
        checkpoints_corrupt=tuple(dict.fromkeys(e["path"] for e in ordered if e["event"] == "checkpoint_corrupt")),
        attempt_starts=_attempt_starts(ordered),
        **(_fault_metrics(ordered, fault_at) if fault_at is not None else {}),
    )


def final_lineage(events: Iterable[Event]) -> dict[int, Event]:
    """Rank-0 step events by iteration; a step recomputed by a later attempt replaces the earlier one."""
    lineage: dict[int, Event] = {}
    for e in _ordered(events):
        if e["event"] == "step" and e["rank"] == 0:
            kept = lineage.get(e["iteration"])
            if kept is None or e["attempt"] >= kept["attempt"]:
                lineage[e["iteration"]] = e
    return dict(sorted(lineage.items()))


def final_losses(events: Iterable[Event]) -> dict[int, float]:
    return {i: e["loss"] for i, e in final_lineage(events).items()}


def _ordered(events: Iterable[Event]) -> list[Event]:
    return sorted(events, key=lambda e: e["mono"])


def _on_rank0(e: Event, name: str) -> bool:
    return e["event"] == name and e["rank"] == 0


def _last(events: list[Event], name: str, key: str) -> Any:
    return next((e.get(key) for e in reversed(events) if e["event"] == name), None)


def _is_notable(e: Event) -> bool:
    name = e["event"]
    if name == "exit":
        return e["rank"] == 0 or e.get("reason") != "completed"
    if name == "straggler_report":
        return bool(e.get("flagged"))
    return name in _ANY_MARKS or (name in _RANK0_MARKS and e["rank"] == 0)


def _mark(e: Event, start: float) -> Mark:
    info = {k: e[k] for k in _INFO_FIELDS if k in e}
    return Mark(e["mono"] - start, e["event"], e["rank"], e["attempt"], info)


def _step(e: Event, start: float) -> Step:
    return Step(e["iteration"], e["loss"], e["attempt"], e["mono"] - start, e.get("step_time", 0.0))


def _wall_seconds(events: list[Event]) -> float | None:
    """Launch to launcher exit; from first to last event when the runner wrote nothing (a bare trainer run)."""
    launches = [e["mono"] for e in events if e["event"] == "launch"]
    exits = [e["mono"] for e in events if e["event"] == "launcher_exit"]
    if launches and exits:
        return exits[-1] - launches[0]
    return events[-1]["mono"] - events[0]["mono"] if events else None


def _attempt_starts(events: list[Event]) -> tuple[float, ...]:
    starts: dict[int, float] = {}
    for e in events:
        if e["event"] == "run_start":
            starts.setdefault(e["attempt"], e["mono"])
    return tuple(starts[a] for a in sorted(starts))


def _fault_metrics(events: list[Event], at: int) -> dict[str, Any]:
    """Detection, recovery and lost work around the first fault, ``events[at]``."""
    fault = events[at]
    attempt, mono = fault["attempt"], fault["mono"]
    target = fault.get("target_rank")
    target = fault["rank"] if target is None else target
    detect = next((e for e in events[at + 1 :] if _is_detection(e, target)), None)
    later = [e for e in events if e["rank"] >= 0 and e["attempt"] > attempt]
    recover = next((e for e in later if e["event"] == "step"), None)
    resumed = _resumed_from(later)
    reached = max((e["iteration"] for e in events if e["event"] == "step" and e["attempt"] == attempt), default=resumed)
    return {
        "fault_mono": mono,
        "fault_attempt": attempt,
        "fault_rank": target,
        "detect_mono": None if detect is None else detect["mono"],
        "detected_by": None if detect is None else detect["event"],
        "time_to_detect_s": None if detect is None else detect["mono"] - mono,
        "recover_mono": None if recover is None else recover["mono"],
        "time_to_recover_s": None if recover is None else recover["mono"] - mono,
        "resumed_from_step": resumed,
        "lost_steps": None if resumed is None else reached - resumed,
    }


def _is_detection(e: Event, fault_rank: int) -> bool:
    """The launcher or the trainer acted on the fault (docs: time_to_detect)."""
    name = e["event"]
    if e["rank"] < 0:
        return name in RUNNER_DETECTIONS
    if name == "straggler_report":
        return bool(e.get("flagged"))
    if name == "exit":
        return e.get("reason") != "completed" and e["rank"] != fault_rank
    return name in RANK_DETECTIONS


def _resumed_from(later: list[Event]) -> int | None:
    """The step a later attempt restarted from: its checkpoint load, or 0 when it stepped without one."""
    first = next((e for e in later if e["event"] in ("checkpoint_load", "step")), None)
    if first is None:
        return None
    return first["iteration"] if first["event"] == "checkpoint_load" else 0
