"""Detection, recovery and lost work around a fault, from the ordered events alone (the metrics of
chaos/judge/timeline.py that a fault defines: their meanings are fixed here and nowhere else)."""

from __future__ import annotations

from typing import Any

from chaos.judge.accounting import signal_name
from runlog import names

Event = dict[str, Any]

RUNNER_DETECTIONS = frozenset({names.FT_TIMEOUT, names.WORKER_FAILED, names.RESTART, names.NCCL_WATCHDOG})
"""Runner events that show the launcher acted on a fault."""
RANK_DETECTIONS = frozenset({names.SIGNAL_RECEIVED, names.INPROCESS_ABORT, names.RERUN})
"""Rank events that show the trainer acted on a fault (plus flagged straggler reports and foreign exits)."""
TIMEOUTS = {names.NCCL_WATCHDOG: "nccl_watchdog", names.INPROCESS_ABORT: "inprocess", names.FT_TIMEOUT: "ft_launcher"}
"""The events of each timeout that can act on a hang (``timeout_won``: the first after the fault)."""


def fault_metrics(events: list[Event], at: int) -> dict[str, Any]:
    """Detection, recovery and lost work around the first fault, ``events[at]``."""
    fault = events[at]
    attempt, mono = fault["attempt"], fault["mono"]
    target = fault.get("target_rank")
    target = fault["rank"] if target is None else target
    detect = next((e for e in events[at + 1 :] if _is_detection(e, target)), None)
    later = [e for e in events if e["rank"] >= 0 and e["attempt"] > attempt]
    recover = next((e for e in later if e["event"] == names.STEP), None)
    resumed = _resumed_from(later)
    reached = max((e["iteration"] for e in events if e["event"] == names.STEP and e["attempt"] == attempt), default=resumed)
    timeouts = (e for e in events[at + 1 :] if e["event"] in TIMEOUTS)
    first_timeout = next(timeouts, None)
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
        "resume_source": _resume_source(later),
        "timeout_won": None if first_timeout is None else TIMEOUTS[first_timeout["event"]],
        "worker_signal": next((signal_name(e["exitcode"]) for e in events[at + 1 :]
                               if e["event"] == names.WORKER_FAILED and e["exitcode"] < 0), None),
        "heartbeat_timeout_s": heartbeat_timeout(events, at),
    }


def heartbeat_timeout(events: list[Event], at: int) -> float | None:
    """The FT heartbeat timeout in force where ``events[at]`` struck: its rank's last ``ft_timeouts`` of that
    attempt before it (configured, or learned and loaded). None where that rank reported none."""
    fault = events[at]
    rank = fault["rank"] if fault.get("target_rank") is None else fault["target_rank"]
    reports = [e for e in events[:at] if e["event"] == names.FT_TIMEOUTS and e["attempt"] == fault["attempt"] and e["rank"] == rank]
    return (reports[-1].get("heartbeat") or {}).get("subsequent") if reports else None


def _resume_source(later: list[Event]) -> str | None:
    """What the first later attempt loaded: an NVRx local checkpoint, a persistent one, or nothing."""
    first = next((e for e in later if e["event"] in (names.CHECKPOINT_LOAD, names.STEP)), None)
    if first is None:
        return None
    if first["event"] == names.STEP:
        return "none"
    return "local" if first.get("local") else "persistent"


def last_fault_metrics(events: list[Event]) -> dict[str, Any]:
    """time_to_detect of the last fault and the heartbeat timeout it met (with several faults, e.g. a hang
    again after learned timeouts)."""
    at = max((i for i, e in enumerate(events) if e["event"] == names.FAULT_INJECTED), default=None)
    if at is None:
        return {}
    last = fault_metrics(events, at)
    return {"time_to_detect_last_s": last["time_to_detect_s"], "heartbeat_timeout_last_s": last["heartbeat_timeout_s"]}


def _is_detection(e: Event, fault_rank: int) -> bool:
    """The launcher or the trainer acted on the fault (docs: time_to_detect)."""
    name = e["event"]
    if e["rank"] < 0:
        return name in RUNNER_DETECTIONS
    if name == names.STRAGGLER_REPORT:
        return bool(e.get("flagged"))
    if name == names.EXIT:
        return e.get("reason") != "completed" and e["rank"] != fault_rank
    return name in RANK_DETECTIONS


def _resumed_from(later: list[Event]) -> int | None:
    """The step a later attempt restarted from: its checkpoint load, or the step before its first step when
    it loaded none (0 for this trainer; a `command` resuming on its own shows it only in its step numbers)."""
    first = next((e for e in later if e["event"] in (names.CHECKPOINT_LOAD, names.STEP)), None)
    if first is None:
        return None
    return first["iteration"] if first["event"] == names.CHECKPOINT_LOAD else first["iteration"] - 1
