"""A finished run folder judged from its files alone: verdicts, journal, picture and summary.

The fault-free baseline is a run of its own: the caller (the runner, or ``python -m chaos judge``) hands
over its folder, so judging never launches anything itself.
"""

from __future__ import annotations

import itertools
import subprocess
from dataclasses import asdict, dataclass, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from chaos.faults.plan import plan_records
from chaos.judge.accounting import OWN_EVENTS, account, record_accounting
from chaos.judge.attribution import armed_sources, attribute, attribution_record, attribution_verdicts
from chaos.judge.culprit import claims as culprit_claims
from chaos.judge.culprit import record_claims
from chaos.judge.launcher_records import (
    cycle_check,
    failed_health_check,
    progress_stop,
    remaining_check,
    remaining_processes,
    restart_time_saved_s,
)
from chaos.judge.registry import breaks_run
from chaos.judge.report import build_journal, format_summary, plot_timeline, write_journal
from chaos.judge.timeline import Metrics, build_timeline, compute_metrics
from chaos.judge.verdicts import (
    BaselineCheck,
    Verdict,
    compare_runs,
    harness_verdicts,
    judge,
    known_failure_verdict,
)
from chaos.schema.loader import load_scenario
from chaos.schema.scenario import Scenario
from runlog import names
from runlog.layout import RunFolder, RunFolderError
from runlog.reader import read_events

PASSED, FAILED, BROKEN = "passed", "failed", "broken"
"""A run's status: every verdict held; the stack did not recover as the scenario expects (a resiliency
failure); or the run broke, so that it cannot say (docs/scenarios.md, "Passed, failed, broken")."""
KNOWN_FAILURE = "known failure"
"""A run's status when it failed exactly as its scenario's known_failure says (an upstream bug): not red."""
EXIT_CODES = {PASSED: 0, KNOWN_FAILURE: 0, FAILED: 1, BROKEN: 3}
"""`python -m chaos run`'s exit code per status (README.md); 2 is bad input, 130 Ctrl-C."""


def exit_code(statuses: list[str]) -> int:
    """The exit code of one or several judged runs: a resiliency failure outranks a broken run, which
    outranks a pass."""
    codes = {EXIT_CODES[s] for s in statuses}
    return 1 if 1 in codes else 3 if 3 in codes else 0


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    journal: dict[str, Any]
    passed: bool
    """It behaved as its scenario says: every verdict passed, or it failed exactly as its known failure."""
    summary: str


def scenario_of(run_dir: Path) -> Scenario:
    """The scenario a run folder ran (the copy the runner keeps there, with its seed)."""
    copy = RunFolder(run_dir).scenario
    if not Path(run_dir).is_dir():
        raise RunFolderError(f"{run_dir}: no such folder")
    if not copy.is_file():
        raise RunFolderError(f"{run_dir}: not a run folder (no {copy.name})")
    return load_scenario(copy, named=False)


def judge_folder(
    run_dir: Path, scenario: Scenario, baseline: Path | str | None, *, scenario_file: Path | None = None
) -> RunOutcome:
    """Judge `run_dir` against `scenario` and its fault-free run (``baseline``: its folder, or why it could
    not be made); (re)writes journal.json and timeline.png."""
    folder = RunFolder(run_dir)
    events = read_events(run_dir)
    plan = plan_records(folder.plan) if folder.plan.is_file() else []
    accounting = account(events, plan, _logs(folder))
    events = [e for e in events if e["event"] not in OWN_EVENTS and e["event"] != names.CULPRIT_CLAIM]
    events += record_accounting(run_dir, accounting, events)
    notes: list[str] = []
    claims = record_claims(run_dir, culprit_claims(events, run_dir, notes))
    events = sorted(events + claims, key=lambda e: e["mono"])
    armed = armed_sources(events, dict(scenario.trainer), scenario.launcher, scenario.flight_recorder, scenario.command is not None)
    attributions = attribute(events, claims, armed, plan)
    retention = scenario.config.checkpoint.most_recent_k if scenario.command is None else -1  # a command's own settings are unknown
    timeline, metrics = build_timeline(events), launcher_metrics(compute_metrics(events, retention), scenario, folder)
    wanted = scenario.expect.baseline
    baseline_check = None
    if wanted is not None and isinstance(baseline, str):
        baseline_check = BaselineCheck(passed=False, message=baseline)
    elif wanted is not None and baseline is not None:
        baseline_check = compare_runs(run_dir, baseline, "exact" if wanted == "exact" else wanted.tolerance)
    verdicts = harness_verdicts(events, scenario.deadline_s, scenario.expect, accounting)
    verdicts += judge(scenario.expect, metrics, baseline_check)
    verdicts += cycle_verdicts(scenario, folder, events)
    verdicts += remaining_verdicts(scenario, folder, events)
    verdicts += attribution_verdicts(scenario.expect, attributions, claims, armed)
    status = run_status(verdicts)
    if known_here(scenario) and status != BROKEN:
        known = known_failure_verdict(scenario.known_failure, verdicts, "\n".join([_output(folder), *notes]))
        verdicts.append(known)
        status = KNOWN_FAILURE if known.passed else FAILED
    plot_timeline(run_dir, timeline, metrics, folder.picture, name=scenario.name, status=status)
    extra = {
        "status": status,
        "seed": scenario.seed,
        "plan": plan,
        "failures": [asdict(f) for f in accounting.failures],
        "attribution": attribution_record(attributions, armed, claims, notes),
        "launcher_log": str(folder.launcher_log),
        "picture": str(folder.picture),
    }
    journal = build_journal(scenario, run_dir, timeline, metrics, verdicts, extra, scenario_file=scenario_file)
    write_journal(folder.journal, journal)
    return RunOutcome(run_dir, journal, status in (PASSED, KNOWN_FAILURE), format_summary(journal))


def launcher_metrics(metrics: Metrics, scenario: Scenario, folder: RunFolder) -> Metrics:
    """The metrics with what ft_launcher's own log says of its health checks and progress tracking (NVRx 0.7)."""
    if scenario.launcher != "ft_launcher":
        return metrics
    log = _output(folder)
    metrics = replace(metrics, health_check_failed=failed_health_check(log))
    stop = progress_stop(log)
    if stop.cycles_run is None:
        return metrics
    saved = restart_time_saved_s(scenario.max_restarts, metrics.restarts, metrics.wall_s)
    return replace(metrics, no_progress_stop_cycles=stop.cycles_run, restart_time_saved_s=saved)


CYCLE_RECORDS = "launcher_cycle_records"
"""The verdict of a run with ``ft.cycle_info_dir``: the launcher's cycle records against the harness's attempts."""


def cycle_verdicts(scenario: Scenario, folder: RunFolder, events: list[dict]) -> list[Verdict]:
    """One verdict where the launcher kept cycle records: they and the attempts the ranks logged agree."""
    where = scenario.ft.cycle_info_dir if scenario.launcher == "ft_launcher" else None
    if not where:
        return []
    attempts = [e["attempt"] for e in events if e["rank"] >= 0 and e["event"] == names.RUN_START]
    agree, text = cycle_check(Path(where.replace("{run_dir}", str(folder.root))), attempts)
    return [Verdict(CYCLE_RECORDS, "the launcher's cycle records (ft.cycle_info_dir) match the attempts the ranks logged", text, agree)]


REMAINING_PROCESSES = "launcher_remaining_processes"
"""The verdict of a run with ``ft.check_remaining_processes``: the processes the launcher listed after
stopping workers against those the harness found left at an attempt's start."""


def remaining_verdicts(scenario: Scenario, folder: RunFolder, events: list[dict]) -> list[Verdict]:
    """One verdict where the launcher checked for remaining processes: every leftover the harness found at
    an attempt's start is one a launcher (of any node) listed after its stop."""
    if scenario.launcher != "ft_launcher" or not scenario.ft.check_remaining_processes:
        return []
    leftovers = [e for e in events if e["event"] == names.LEFTOVERS_AT_START]
    reports = [report for log in _logs(folder).values() for report in remaining_processes(log)]  # every node's launcher
    agree, text = remaining_check(reports, leftovers)
    wanted = "every process the harness found left at an attempt's start was listed by ft_launcher after its stop (ft.check_remaining_processes)"
    return [Verdict(REMAINING_PROCESSES, wanted, text, agree)]


def known_here(scenario: Scenario) -> bool:
    """Whether the scenario's known failure applies on this machine (``only_without``: none of those
    packages installed, or none at that version; ``only_with``: all of those conditions hold)."""
    known = scenario.known_failure
    if known is None or any(installed(name) for name in known.only_without):
        return False
    return all(machine_has(condition, scenario) for condition in known.only_with)


def machine_has(condition: str, scenario: Scenario) -> bool:
    """Whether a known failure's ``only_with`` condition holds here: a package at a version, or fewer GPUs
    (nvidia-smi's list; none without it) than the scenario's ranks on a node."""
    if condition == "fewer-gpus-than-ranks-per-node":
        return gpu_count() < scenario.node_size
    return installed(condition)


def gpu_count() -> int:
    """The GPUs nvidia-smi lists (0 where it is missing or fails): what NVML, not torch, sees."""
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in listed.splitlines())


def installed(distribution: str) -> bool:
    """Whether a package is installed (its metadata is found; nothing of it is imported), at a version the
    requirement allows where it names one (``nvidia-resiliency-ext>=0.7``)."""
    name, _, least = distribution.partition(">=")
    try:
        found = version(name)
    except PackageNotFoundError:
        return False
    return not least or _release(found) >= _release(least)


def _release(text: str) -> tuple[int, ...]:
    """A version's leading numbers (``0.7.0rc1`` -> (0, 7, 0)), for a ``>=`` against the one installed."""
    numbers = []
    for part in text.split("."):
        digits = "".join(itertools.takewhile(str.isdigit, part))
        if not digits:
            break
        numbers.append(int(digits))
        if digits != part:
            break
    return tuple(numbers)


def run_status(verdicts: list[Verdict]) -> str:
    """passed; broken when a verdict failed that says the run broke (an unexplained failure, a fault that
    never came due, a process left: chaos/judge/registry.py), whatever else failed, since then the other
    verdicts do not judge the faults the scenario planned; else failed, the stack did not recover as expected."""
    failed = [v.name for v in verdicts if not v.passed]
    if any(breaks_run(name) for name in failed):
        return BROKEN
    return FAILED if failed else PASSED


def _logs(folder: RunFolder) -> dict[str, str]:
    """The launchers' output by node ("" for the one-node launch), where a failure's cause is quoted from."""
    logs = {"": _output(folder)}
    for path in sorted(folder.root.glob("launcher-*.log")):
        logs[path.stem.removeprefix("launcher-")] = _read(path)
    return logs


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _output(folder: RunFolder) -> str:
    """What the run printed (its one-node launch's log), where a known failure's signature must show (or in the
    notes of a source the judge could not read: torch's Flight Recorder analyser's error)."""
    return _read(folder.launcher_log)
