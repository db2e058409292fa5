"""A cost profile from judged run folders: the judge's metrics of each fault and the run's own events.

Per fault class the medians over every fault of that class in the runs (a soak has many): detection is the
judge's time_to_detect_s (chaos.judge.recovery.fault_metrics, for each fault as the journal has it for the
first); the checkpoint load is the next attempt's ``checkpoint_load`` seconds; the restart is what is left of
the judge's time_to_recover_s (fault -> first step after the restart) once detection, the load and that
first step are taken out. Runs are grouped by setting: respawn (ft_launcher, torchrun) against NVRx's in-process
restart, sync against async saves; the base is respawn with sync saves, the others are alternatives.
"""

from __future__ import annotations

import bisect
import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from chaos.forecast.profile import (
    CLASS_OF_FAULT,
    Alternative,
    ClassCost,
    FaultClass,
    Profile,
    SaveCost,
    StartupPoint,
)
from chaos.judge.recovery import fault_metrics
from chaos.judge.run import scenario_of
from chaos.schema.scenario import Scenario
from runlog import names
from runlog.layout import RunFolder, RunFolderError
from runlog.reader import read_events

Event = dict[str, Any]


@dataclass(frozen=True)
class RunCosts:
    """What one judged run measured."""

    name: str
    restart_mode: str
    """respawn or inprocess."""
    is_async: bool
    save_interval: int | None
    nodes: int
    step_time_s: float | None
    step_period_s: float | None
    step_overhead_s: float | None
    save_gaps: tuple[float, ...]
    """Per save, the time from its step to the next that the next step's own time does not cover."""
    startup_s: float | None
    shutdown_s: float | None
    costs: list[tuple[FaultClass, dict[str, Any]]] = field(default_factory=list)
    """Per fault of a priced class: detect_s, and where the run restarted, restart_s, load_s, lost_steps, loses_progress."""
    settings: dict[str, Any] = field(default_factory=dict)


def build_profile(run_dirs: Sequence[str | Path]) -> Profile:
    """The profile of these judged run folders (RunFolderError, naming the folder, for one not judged)."""
    runs = [measure_run(Path(d)) for d in run_dirs]
    respawn = [r for r in runs if r.restart_mode == "respawn"]
    base = [r for r in respawn if not r.is_async] or respawn or runs  # an alternative's runs price only it
    steps = [r.step_time_s for r in base if r.step_time_s is not None]
    overheads = [r.step_overhead_s for r in base if r.step_overhead_s is not None]
    if not steps or not overheads:
        raise RunFolderError(f"{run_dirs[0]}: no run with two consecutive steps to measure the step time from")
    startup = statistics.median([r.startup_s for r in base if r.startup_s is not None] or [0.0])
    classes = _classes(base, startup)
    alternatives: dict[str, Alternative] = {}
    inprocess = _classes([r for r in runs if r.restart_mode == "inprocess"], startup)
    if inprocess and respawn:
        alternatives["inprocess_restart"] = Alternative(description="NVRx in-process restart (measured)", classes=inprocess)
    overhead = max(0.0, statistics.median(overheads))
    sync_save = _save([r for r in runs if not r.is_async], overhead)
    async_save = _save([r for r in runs if r.is_async], overhead)
    if sync_save and async_save:
        alternatives["async_save"] = Alternative(description="async checkpoint saves (measured)", save=async_save)
    save = sync_save or async_save
    if save is None:
        raise RunFolderError(f"{run_dirs[0]}: no run saved a checkpoint between two steps; the save stall is unmeasured")
    return Profile(
        source="chaos forecast profile: " + ", ".join(sorted({r.name for r in runs})),
        step_time_s=statistics.median(steps),
        step_overhead_s=overhead,
        startup_s=startup,
        shutdown_s=statistics.median([r.shutdown_s for r in base if r.shutdown_s is not None] or [0.0]),
        startup_scaling=_scaling(runs),
        save=save,
        classes=classes,
        settings={**base[0].settings, "runs": len(runs)},
        alternatives=alternatives,
    )


def measure_run(run_dir: Path) -> RunCosts:
    folder = RunFolder(run_dir)
    if not run_dir.is_dir():
        raise RunFolderError(f"{run_dir}: no such folder")
    if not folder.journal.is_file():
        raise RunFolderError(f"{run_dir}: not a judged run folder (no journal.json): judge it first with chaos judge {run_dir}")
    try:
        journal = json.loads(folder.journal.read_text())
        metrics = journal["metrics"]
    except (OSError, ValueError, KeyError, TypeError):
        raise RunFolderError(f"{folder.journal}: not a journal (JSON with metrics)") from None
    scenario = scenario_of(run_dir)
    events = read_events(run_dir)
    steps = [e for e in events if e["event"] == names.STEP and e["rank"] == 0]
    gaps = _step_gaps(steps, events)
    period = statistics.median(g for g, _ in gaps) if gaps else None
    kinds = {p.get("fault_id"): p.get("kind") or p.get("type") for p in journal.get("plan") or []}
    cfg = scenario.config
    return RunCosts(
        name=scenario.name,
        restart_mode="inprocess" if cfg.inprocess_restart.enabled else "respawn",
        is_async=cfg.checkpoint.async_save,
        save_interval=cfg.checkpoint.save_interval,
        nodes=scenario.nodes,
        step_time_s=_mean(b.get("step_time") for a, b in pairwise(steps) if a["attempt"] == b["attempt"]),
        step_period_s=period,
        step_overhead_s=statistics.fmean(o for _, o in gaps) if gaps else None,
        save_gaps=tuple(_save_gaps(steps, events)),
        startup_s=metrics.get("start_s"),
        shutdown_s=_shutdown(steps, events),
        costs=_fault_costs(events, kinds, period),
        settings=_settings(scenario, metrics),
    )


def _fault_costs(events: list[Event], kinds: dict[Any, Any], period: float | None) -> list[tuple[FaultClass, dict[str, Any]]]:
    """Each injected fault of a priced class with what it cost, by the judge's metrics of that fault."""
    out = []
    for at, e in enumerate(events):
        if e["event"] != names.FAULT_INJECTED:
            continue
        cls = CLASS_OF_FAULT.get(kinds.get(e.get("fault_id")) or e.get("fault"))
        cost = _fault_cost(fault_metrics(events, at), events, period) if cls else {}
        if cost:
            out.append((cls, cost))
    return out


def _fault_cost(metrics: dict[str, Any], events: list[Event], period: float | None) -> dict[str, Any]:
    """A fault's costs, from the judge's metrics of it; a run that never restarted training (the trainer exits
    for the scheduler to relaunch it, as the rerun state machine does) measures detection alone."""
    detect = metrics.get("time_to_detect_s")
    if detect is None:
        return {}
    cost: dict[str, Any] = {"detect_s": detect}
    recover, attempt = metrics.get("time_to_recover_s"), metrics.get("fault_attempt") or 0
    if recover is None:
        return cost
    loads = [e for e in events if e["event"] == names.CHECKPOINT_LOAD and e["rank"] == 0 and e["attempt"] == attempt + 1]
    load = loads[0].get("seconds", 0.0) if loads else 0.0
    first_step = period or 0.0
    cost["load_s"] = load
    cost["restart_s"] = max(0.0, recover - detect - load - first_step)
    lost = metrics.get("lost_steps")
    cost["lost_steps"] = lost
    cost["loses_progress"] = bool(lost)
    return cost


def _classes(runs: Iterable[RunCosts], startup: float) -> dict[FaultClass, ClassCost]:
    by_class: dict[FaultClass, list[tuple[RunCosts, dict[str, Any]]]] = defaultdict(list)
    for r in runs:
        for cls, cost in r.costs:
            by_class[cls].append((r, cost))
    loads = [c["load_s"] for samples in by_class.values() for _, c in samples if "load_s" in c]
    out: dict[FaultClass, ClassCost] = {}
    for cls, samples in by_class.items():
        full = [(r, c) for r, c in samples if "restart_s" in c]
        notes = "" if full else "restart_s: the first start-up (no run relaunched); load_s: the other classes' median"
        pick = full or samples
        lost = [c["lost_steps"] for _, c in full if c.get("lost_steps") is not None]
        period = statistics.median([r.step_period_s or 0.0 for r, _ in pick])
        out[cls] = ClassCost(
            detect_s=statistics.median(c["detect_s"] for _, c in pick),
            restart_s=statistics.median(c["restart_s"] for _, c in full) if full else startup,
            load_s=statistics.median(c["load_s"] for _, c in full) if full else statistics.median(loads or [0.0]),
            loses_progress=any(c.get("loses_progress", True) for _, c in full) if full else True,
            lost_steps=statistics.median(lost) if lost else None,
            lost_s=statistics.median(lost) * period if lost else None,
            runs=len({id(r) for r, _ in pick}),
            scenarios=sorted({r.name for r, _ in pick}),
            notes=notes,
        )
    return out


def _save(runs: list[RunCosts], overhead: float) -> SaveCost | None:
    """The saves of these runs: the median of their save gaps less the loop's overhead is the stall."""
    stalls = [max(0.0, g - overhead) for r in runs for g in r.save_gaps]
    intervals = [r.save_interval for r in runs if r.save_interval]
    if not stalls or not intervals:
        return None
    return SaveCost(interval_steps=statistics.median_low(intervals), stall_s=statistics.median(stalls), is_async=runs[0].is_async)


def _scaling(runs: list[RunCosts]) -> list[StartupPoint]:
    """Start-up by node count, where runs of more than one size were given."""
    by_nodes: dict[int, list[float]] = defaultdict(list)
    for r in runs:
        if r.startup_s is not None:
            by_nodes[r.nodes].append(r.startup_s)
    if len(by_nodes) < 2:
        return []
    return [StartupPoint(nodes=n, startup_s=statistics.median(v)) for n, v in sorted(by_nodes.items())]


def _shutdown(steps: list[Event], events: list[Event]) -> float | None:
    """The run's last step -> the launcher's exit."""
    exits = [e["mono"] for e in events if e["event"] == names.LAUNCHER_EXIT]
    return exits[-1] - steps[-1]["mono"] if exits and steps and exits[-1] > steps[-1]["mono"] else None


def _step_gaps(steps: list[Event], events: list[Event]) -> list[tuple[float, float]]:
    """Each wall time from one rank-0 step to the next of the same attempt (leaving out those a save sits in),
    and what of it the later step's own time does not cover (the loop's overhead)."""
    saves = sorted(e["mono"] for e in events if e["event"] in (names.CHECKPOINT_SAVE_BEGIN, names.CHECKPOINT_SAVE_END) and e["rank"] == 0)
    return [
        (b["mono"] - a["mono"], b["mono"] - a["mono"] - (b.get("step_time") or 0.0)) for a, b in pairwise(steps)
        if a["attempt"] == b["attempt"] and b["iteration"] == a["iteration"] + 1
        and bisect.bisect_right(saves, a["mono"]) == bisect.bisect_left(saves, b["mono"])  # no save between them
    ]


def _save_gaps(steps: list[Event], events: list[Event]) -> list[float]:
    """Per save, the time from its step to the next less the next step's own time: the save's stall and the
    loop's overhead (a run that saves every step has no plain gap to compare with)."""
    by_key = {(e["attempt"], e["iteration"]): e for e in steps}
    gaps = []
    for begin in (e for e in events if e["event"] == names.CHECKPOINT_SAVE_BEGIN and e["rank"] == 0):  # async: it ends later
        before, after = by_key.get((begin["attempt"], begin["iteration"])), by_key.get((begin["attempt"], begin["iteration"] + 1))
        if before is not None and after is not None:
            gaps.append(after["mono"] - before["mono"] - (after.get("step_time") or 0.0))
    return gaps


def _settings(scenario: Scenario, metrics: dict[str, Any]) -> dict[str, Any]:
    cfg = scenario.config
    return {
        "launcher": scenario.launcher,
        "world_size": scenario.world_size,
        "save_interval": cfg.checkpoint.save_interval,
        "async_save": cfg.checkpoint.async_save,
        "inprocess_restart": cfg.inprocess_restart.enabled,
        "heartbeat_timeout_s": metrics.get("heartbeat_timeout_s"),
    }


def _mean(values: Iterable[Any]) -> float | None:
    """The mean (a run's useful time is the sum of its step times), of steps after an attempt's first (its warm-up)."""
    got = [v for v in values if isinstance(v, (int, float))]
    return statistics.fmean(got) if got else None
