"""What happened in a run, and how fast it recovered, computed from its events alone.

Pure functions of the event list that ``runlog.reader.read_events`` returns, so a run folder can be judged
again later and tests can hand-build events with chosen ``mono`` stamps. docs/events.md names the events;
the metric meanings (detect, recover, lost steps, goodput) are fixed here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.judge.recovery import RANK_DETECTIONS, RUNNER_DETECTIONS, fault_metrics, last_fault_metrics
from chaos.judge.retention import stale_resumes
from runlog import names
from runlog.reader import read_events

Event = dict[str, Any]


_RANK0_MARKS = frozenset(
    {names.RUN_START, names.RESUME, names.CHECKPOINT_SAVE_END, names.CHECKPOINT_LOAD, names.CHECKPOINT_CORRUPT, names.FT_TIMEOUTS}
)
_ANY_MARKS = frozenset(
    {names.LAUNCH, names.FAULT_INJECTED, names.LINK_RESTORED, names.FAULT_MISSED, names.SIGNAL_SENT, names.LAUNCHER_EXIT, names.LEFTOVER, names.DEADLINE, names.AGENT_START, names.AGENT_EXIT,
     names.SLURM_JOB, names.UNEXPLAINED_FAILURE, names.FAULT_NEVER_DUE, names.LEFTOVERS_AT_START, names.LEFTOVER_GONE}
    | RUNNER_DETECTIONS
    | RANK_DETECTIONS
    | {names.PITFALL, names.LOCAL_CHECKPOINT_SAVE}
)
_INFO_FIELDS = (
    "iteration", "fault", "target_rank", "reason", "code", "error", "signal", "path",
    "local_rank", "exitcode", "pids", "seconds", "flagged", "state", "scores", "diagnosis", "target_node", "agent",
    "heartbeat", "calculated", "exit_code", "job_id", "name", "local", "network", "isolation", "cause",
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
    step_time: float | None
    """None when not observed (a command's output line, a Megatron line without its elapsed time)."""


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
    slowest_step_s: float | None = None  # rank 0's longest step of the final lineage (None: a step without its time)
    longest_step_gap_s: float | None = None  # rank 0's longest time from a step to the next, from the first fault on
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
    time_to_detect_last_s: float | None = None
    heartbeat_timeout_s: float | None = None
    """The FT heartbeat timeout in force where the first fault struck (a limit's ``timeouts`` unit)."""
    heartbeat_timeout_last_s: float | None = None
    """The same where the last fault struck: a learned one after ``ft.calc_ft_timeouts``."""
    start_s: float | None = None
    """The first start: the launch to the first step (a limit's ``startups`` unit; None without either)."""
    faults_injected: int = 0
    checkpoints_rejected: int = 0
    preemption_saved: bool | None = None
    """None without a sigterm fault; else whether rank 0 sealed a checkpoint within its grace period."""
    grace_killed: bool | None = None
    """None without a sigterm fault; else whether the runner SIGKILLed after it."""
    steps_during_async_save: int = 0
    steps_during_stall: int | None = None  # rank-0 steps while the run's storage was stopped (None: never stopped)
    exit_reason: str | None = None
    saved_at_exit: bool | None = None
    stragglers_flagged: list[int] | None = None
    """None when no straggler report was made (so "flags nobody" needs reports to hold)."""
    reports_to_flag: int | None = None
    inprocess_restarts: int | None = None
    """None when the run did not use NVRx's in-process Wrapper."""
    trainer_exit_codes: list[int | None] | None = None
    """Per launch, rank 0's last exit code (16/17: the rerun state machine); None in a launch it wrote none."""
    rerun_diagnosis: str | None = None
    """The last diagnosis of the rerun state machine's `rerun` events."""
    learned_timeouts_used: bool | None = None
    """Whether the last attempt's first `ft_timeouts` says calculated (None: no attempt reported its timeouts)."""
    world_size_after: int | None = None
    """The world size the ranks of the last restart round started with."""
    nodes_after: list[str] | None = None
    """The node identities of the last restart round's ranks, sorted."""
    launches: int = 0
    """The supervisor's (or a Slurm job's) launches of the job: a relaunch or a requeue is one more."""
    slurm_job_state: str | None = None
    """The job's last state in Slurm's record (`slurm_job` event); None for a run not submitted to Slurm."""
    slurm_exit_code: str | None = None
    """The job's exit code in Slurm's record, `code:signal`."""
    resume_source: str | None = None
    """What the first later attempt after the fault resumed from: local, persistent or none."""
    stale_resumes: int | None = None
    """Restarts that resumed from another checkpoint than the newest one retention keeps (chaos/judge/retention.py)."""
    timeout_won: str | None = None
    """Which timeout acted first on the fault: nccl_watchdog, inprocess or ft_launcher (None: none did)."""
    worker_signal: str | None = None
    """The signal the first worker that died of one after the fault died of (the launcher's exitcode -N)."""
    no_progress_stop_cycles: int | None = None
    """The cycles run when ft_launcher's progress tracker stopped the job (its log; chaos/judge/launcher_records.py)."""
    restart_time_saved_s: float | None = None
    """That stop against burning every restart: the restarts left unused x the mean cycle so far."""
    health_check_failed: str | None = None
    """The first health check ft_launcher logged as failed before a rendezvous, or "none" (None: not ft_launcher)."""
    pitfalls: list[str] = field(default_factory=list)
    """The resiliency card's pitfalls the ranks reported (``pitfall`` events), sorted."""


def load_run(run_dir: str | Path) -> tuple[Timeline, Metrics]:
    """Read a run folder's events once and compute both views of them."""
    events = read_events(run_dir)
    return build_timeline(events), compute_metrics(events)


def build_timeline(events: Iterable[Event]) -> Timeline:
    ordered = _ordered(events)
    start = ordered[0]["mono"] if ordered else 0.0
    marks = tuple(_mark(e, start) for e in ordered if _is_notable(e))
    steps = tuple(_step(e, start) for e in ordered if e["event"] == names.STEP and e["rank"] == 0)
    first_start = next((e for e in ordered if e["event"] == names.RUN_START), {})
    platform = {k: first_start[k] for k in ("device", "backend") if k in first_start}
    return Timeline(start, marks, steps, {**(first_start.get("versions") or {}), **platform})


def compute_metrics(events: Iterable[Event], most_recent_k: int = -1) -> Metrics:
    """The run's metrics; `most_recent_k`: the checkpoint retention its config promises (-1: keep all)."""
    ordered = _ordered(events)
    lineage = final_lineage(ordered)
    wall = _wall_seconds(ordered)
    times = [e.get("step_time") for e in lineage.values()]
    useful = None if None in times else sum(times)  # a step without its time (a command's line): not observed
    fault_at = next((i for i, e in enumerate(ordered) if e["event"] == names.FAULT_INJECTED), None)
    return Metrics(
        exit_code=_last(ordered, names.LAUNCHER_EXIT, "code"),
        restarts=_restarts(ordered),
        completed_steps=max((e["iteration"] for e in ordered if e["event"] == names.STEP), default=0),
        wall_s=wall,
        goodput=useful / wall if wall and useful is not None else None,
        slowest_step_s=max(times) if times and useful is not None else None,
        longest_step_gap_s=_longest_gap(lineage, ordered[fault_at]["mono"] if fault_at is not None else None),
        losses={i: e["loss"] for i, e in lineage.items()},
        checkpoints_saved=tuple(e["iteration"] for e in ordered if _on_rank0(e, names.CHECKPOINT_SAVE_END)),
        checkpoints_corrupt=tuple(dict.fromkeys(e["path"] for e in ordered if e["event"] == names.CHECKPOINT_CORRUPT)),
        attempt_starts=_attempt_starts(ordered),
        start_s=_start_s(ordered),
        faults_injected=sum(1 for e in ordered if e["event"] == names.FAULT_INJECTED),
        checkpoints_rejected=sum(1 for e in ordered if _on_rank0(e, names.CHECKPOINT_CORRUPT)),
        stale_resumes=stale_resumes(ordered, most_recent_k),
        **_preemption_metrics(ordered),
        steps_during_async_save=_steps_during_async_saves(ordered),
        steps_during_stall=_steps_during_stalls(ordered),
        **_exit_metrics(ordered),
        inprocess_restarts=max((e["inprocess_iteration"] for e in ordered if _on_rank0(e, names.INPROCESS_START)), default=None),
        trainer_exit_codes=_trainer_exit_codes(ordered),
        rerun_diagnosis=next((e["diagnosis"] for e in reversed(ordered) if e["event"] == names.RERUN and e.get("diagnosis")), None),
        learned_timeouts_used=_learned_timeouts_used(ordered),
        **_straggler_metrics(ordered),
        **_last_round(ordered),
        **last_fault_metrics(ordered),
        launches=sum(1 for e in ordered if e["event"] == names.LAUNCH and e["rank"] < 0),
        **_slurm_metrics(ordered),
        pitfalls=sorted({e["name"] for e in ordered if e["event"] == names.PITFALL}),
        **(fault_metrics(ordered, fault_at) if fault_at is not None else {}),
    )


def _restarts(events: list[Event]) -> int | None:
    """The last attempt: the largest a rank's event carries, or a launcher's restart line announced (ranks that
    write no events of their own, or died at start-up, still restarted); None when neither shows one."""
    attempts = [e["attempt"] for e in events if e["rank"] >= 0 or (e["event"] == names.RESTART and e["rank"] < 0)]
    return max(attempts, default=None)


def _last_round(events: list[Event]) -> dict[str, Any]:
    """Who the last restart round ran on: its world size and its ranks' nodes (a lost node, a spare's arrival)."""
    starts = [e for e in events if e["event"] == names.RUN_START and e["rank"] >= 0]
    if not starts:
        return {}
    last = max(e["attempt"] for e in starts)
    final = [e for e in starts if e["attempt"] == last]
    nodes = sorted({e["node"] for e in final if "node" in e})
    return {"world_size_after": final[0].get("world_size"), "nodes_after": nodes or None}


def _learned_timeouts_used(events: list[Event]) -> bool | None:
    """The FT timeouts the last attempt started with were calculated: learned and loaded from ft_state.json."""
    reports = [e for e in events if _on_rank0(e, names.FT_TIMEOUTS)]
    if not reports:
        return None
    last = max(e["attempt"] for e in reports)
    return bool(next(e for e in reports if e["attempt"] == last).get("calculated"))


def _steps_during_async_saves(events: list[Event]) -> int:
    """Rank-0 steps that completed while an async save was in flight: the overlap async saving buys."""
    open_since: dict[int, float] = {}
    windows = []
    for e in events:
        if e["rank"] != 0 or not e.get("async"):
            continue
        if e["event"] == names.CHECKPOINT_SAVE_BEGIN:
            open_since[e["iteration"]] = e["mono"]
        elif e["event"] == names.CHECKPOINT_SAVE_END and e["iteration"] in open_since:
            windows.append((open_since.pop(e["iteration"]), e["mono"]))
    return _steps_within(events, windows)


def _steps_during_stalls(events: list[Event]) -> int | None:
    """Rank-0 steps that completed while the run's storage server was stopped (from its keeper's SIGSTOP to its
    SIGCONT): whether training went on through a storage stall. None when the storage never stopped."""
    windows, stopped = [], None
    for e in events:
        if e["event"] == names.SIGNAL_SENT and e.get("storage"):
            if e["signal"] == "SIGSTOP":
                stopped = e["mono"]
            elif stopped is not None:
                windows.append((stopped, e["mono"]))
                stopped = None
    if stopped is not None:
        windows.append((stopped, float("inf")))
    return _steps_within(events, windows) if windows else None


def _steps_within(events: list[Event], windows: list[tuple[float, float]]) -> int:
    """Rank-0 steps that completed inside any of the (start, end) windows."""
    return sum(1 for e in events if _on_rank0(e, names.STEP) and any(a < e["mono"] < b for a, b in windows))


def _exit_metrics(events: list[Event]) -> dict[str, Any]:
    """Rank 0's last exit: its reason, and whether a checkpoint of its step was sealed before it."""
    last = next((e for e in reversed(events) if _on_rank0(e, names.EXIT)), None)
    if last is None:
        return {}
    saved = [e["iteration"] for e in events if _on_rank0(e, names.CHECKPOINT_SAVE_END) and e["mono"] <= last["mono"]]
    return {"exit_reason": last.get("reason"), "saved_at_exit": bool(saved) and saved[-1] == last.get("iteration")}


def _trainer_exit_codes(events: list[Event]) -> list[int | None] | None:
    """Per launch (a runner `launch` event starts one), rank 0's last exit code; None where it wrote none."""
    launches: list[int | None] = []
    for e in events:
        if e["event"] == names.LAUNCH and e["rank"] < 0:
            launches.append(None)
        elif _on_rank0(e, names.EXIT):
            if not launches:  # a bare trainer run: no runner, one launch
                launches.append(None)
            launches[-1] = e.get("code")
    return launches or None


def _straggler_metrics(events: list[Event]) -> dict[str, Any]:
    """Ranks flagged by any straggler report, and how many reports after the first fault it took to flag its rank."""
    reports = [e for e in events if e["event"] == names.STRAGGLER_REPORT]
    if not reports:
        return {}
    flagged = sorted({r for e in reports for r in e.get("flagged", ())})
    fault = next((e for e in events if e["event"] == names.FAULT_INJECTED), None)
    if fault is None:
        return {"stragglers_flagged": flagged}
    after = [e for e in reports if e["mono"] > fault["mono"]]
    hit = next((i for i, e in enumerate(after, 1) if fault.get("target_rank") in e.get("flagged", ())), None)
    return {"stragglers_flagged": flagged, "reports_to_flag": hit}


def _slurm_metrics(events: list[Event]) -> dict[str, Any]:
    """The job as Slurm recorded it when it ended (the submitting host's last `slurm_job` event)."""
    record = next((e for e in reversed(events) if e["event"] == names.SLURM_JOB), None)
    return {} if record is None else {"slurm_job_state": record.get("state"), "slurm_exit_code": record.get("exit_code")}


def _preemption_metrics(events: list[Event]) -> dict[str, Any]:
    """Around the first SIGTERM the runner (or Slurm) sent: a checkpoint sealed inside the grace by the
    attempt that got the signal (a relaunch saving within those seconds did not save the preempted run),
    and a SIGKILL after it (Slurm's own, at the time limit, shows as the job's TIMEOUT state)."""
    term = next((e for e in events if e["event"] == names.FAULT_INJECTED and e.get("fault") == "sigterm"), None)
    if term is None:
        return {}
    end = term["mono"] + term["grace_s"]
    saved = any(
        _on_rank0(e, names.CHECKPOINT_SAVE_END) and e["attempt"] == term["attempt"] and term["mono"] < e["mono"] <= end
        for e in events
    )
    killed = any(
        e["event"] == names.SIGNAL_SENT and e["signal"] == "SIGKILL" and e["mono"] > term["mono"] for e in events
    ) or _slurm_metrics(events).get("slurm_job_state") == "TIMEOUT"
    return {"preemption_saved": saved, "grace_killed": killed}


def final_lineage(events: Iterable[Event]) -> dict[int, Event]:
    """Rank-0 step events by iteration; a step recomputed by a later attempt replaces the earlier one."""
    lineage: dict[int, Event] = {}
    for e in _ordered(events):
        if e["event"] == names.STEP and e["rank"] == 0:
            kept = lineage.get(e["iteration"])
            if kept is None or e["attempt"] >= kept["attempt"]:
                lineage[e["iteration"]] = e
    return dict(sorted(lineage.items()))


def _longest_gap(lineage: dict[int, Event], since: float | None) -> float | None:
    """The longest time between two consecutive steps of one attempt, the later one after `since` (the first
    fault; None: the whole run): how long the fault held training up, as the job saw it (a trainer's own
    step time may leave its saves out: Megatron's does), apart from a first save's set-up before it."""
    gaps = [
        e["mono"] - lineage[i - 1]["mono"] for i, e in lineage.items()
        if i - 1 in lineage and lineage[i - 1]["attempt"] == e["attempt"] and (since is None or e["mono"] > since)
    ]
    return max(gaps, default=None)


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
    if name == names.EXIT:
        return e["rank"] == 0 or e.get("reason") != "completed"
    if name == names.STRAGGLER_REPORT:
        return bool(e.get("flagged"))
    return name in _ANY_MARKS or (name in _RANK0_MARKS and e["rank"] == 0)


def _mark(e: Event, start: float) -> Mark:
    info = {k: e[k] for k in _INFO_FIELDS if k in e}
    return Mark(e["mono"] - start, e["event"], e["rank"], e["attempt"], info)


def _step(e: Event, start: float) -> Step:
    return Step(e["iteration"], e["loss"], e["attempt"], e["mono"] - start, e.get("step_time"))


def _wall_seconds(events: list[Event]) -> float | None:
    """Launch to launcher exit; from first to last event when the runner wrote nothing (a bare trainer run)."""
    launches = [e["mono"] for e in events if e["event"] == names.LAUNCH]
    exits = [e["mono"] for e in events if e["event"] == names.LAUNCHER_EXIT]
    if launches and exits:
        return exits[-1] - launches[0]
    return events[-1]["mono"] - events[0]["mono"] if events else None


def _attempt_starts(events: list[Event]) -> tuple[float, ...]:
    starts: dict[int, float] = {}
    for e in events:
        if e["event"] == names.RUN_START:
            starts.setdefault(e["attempt"], e["mono"])
    return tuple(starts[a] for a in sorted(starts))


def _start_s(events: list[Event]) -> float | None:
    launch = next((e["mono"] for e in events if e["event"] == names.LAUNCH), None)
    step = next((e["mono"] for e in events if e["event"] == names.STEP), None)
    return None if launch is None or step is None else step - launch
