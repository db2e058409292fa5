"""ft_launcher's own account of a run (NVRx 0.7), read as evidence beside the harness's.

- **Cycle records** (``ft.cycle_info_dir``): the launcher writes one JSON file per cycle (rendezvous round),
  ``cycle_info.<job_id>.<attempt_index>.<cycle_number>``, with the cycle's start and end times and active
  ranks. ``cycle_check`` holds them against the attempts the harness saw in the ranks' event logs: the
  same cycle numbers, every record closed. A disagreement is a failed verdict that lists both sides; neither
  side is preferred.
- **Health checks before rendezvous** (``ft.storage_healthcheck_path``, ``ft.enable_nic_healthcheck``): a
  failed one makes the launcher exit 1 without starting workers ("<check> failed for node ...");
  ``failed_health_check`` names the first.
- **Progress tracking** (``ft.max_no_progress_cycles`` with ``ft.checkpoint_iteration_file``): before each
  restart the launcher compares the checkpoint iteration with the one the cycle started from; after
  ``max_no_progress_cycles`` cycles in a row without progress it stops the job with the no-restart exit code
  (93 unless ``ft.no_restart_exit_code``). ``progress_stop`` reads its log lines: the cycles it judged, and
  whether it stopped.
- **Remaining processes** (``ft.check_remaining_processes``): after stopping a cycle's workers (SIGTERM to
  each worker's process group, its descendants included, then SIGKILL 1 s later) the launcher lists the
  processes still alive in those process groups; it kills nothing more. ``remaining_processes`` reads the
  lists; ``remaining_check`` holds them against the harness's ``leftovers_at_start`` (what the runner found
  alive at the next attempt's start): which processes both saw, which the launcher listed and were gone by
  the next start (it looks right after its SIGKILL), which the harness found and the launcher missed (the
  launcher looks only in the workers' process groups; the harness at every process carrying the run's
  marker). A missed one is a disagreement: the verdict fails and lists both sides, neither taken as right.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

CYCLE_FILE = re.compile(r"^cycle_info\.(?P<job>.*)\.(?P<attempt>\d+)\.(?P<cycle>\d+)$")
NO_PROGRESS = re.compile(r"Training cycle #(?P<cycle>\d+) made NO progress: (?P<before>-?\d+) \S+ (?P<after>-?\d+)")
PROGRESS = re.compile(r"Training cycle #(?P<cycle>\d+) made progress: (?P<before>-?\d+) \S+ (?P<after>-?\d+)")
STOPPED = "Progress tracker detected no progress across restarts"
HEALTH_FAILED = re.compile(r"(?P<check>[A-Z][A-Za-z ]*?health check) failed for node")
NOT_REPORTED = "Progress tracking is enabled but no iterations are being reported"
REMAINING = re.compile(r"Found (?P<count>\d+) remaining processes in worker PGIDs after termination:")
REMAINING_PROCESS = re.compile(
    r"PID=(?P<pid>\d+), PPID=(?P<ppid>-?\d+), PGID=(?P<pgid>\d+), name=(?P<name>.*?), status=(?P<status>[\w-]+), cmdline=(?P<cmdline>.*)$"
)


class CycleRecordError(ValueError):
    """A cycle record that cannot be read: the verdict says which and why."""


@dataclass(frozen=True)
class CycleRecord:
    cycle: int
    attempt_index: int
    start: str
    end: str
    active_ranks: str


def read_cycle_records(folder: Path) -> list[CycleRecord]:
    """Every cycle record in `folder`, by cycle number (the `.current` link and temp files are skipped)."""
    records = []
    for path in sorted(folder.iterdir()) if folder.is_dir() else ():
        if not CYCLE_FILE.match(path.name) or path.is_symlink():
            continue
        try:
            data = json.loads(path.read_text())
            records.append(CycleRecord(int(data["cycle_number"]), int(data["attempt_index"]), str(data["cycle_start_time"]),
                                       str(data["cycle_end_time"]), str(data.get("active_ranks", ""))))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CycleRecordError(f"{path.name}: {type(e).__name__}: {e}") from None
    return sorted(records, key=lambda r: r.cycle)


def cycle_check(folder: Path, attempts: list[int]) -> tuple[bool, str]:
    """(agree, what both sides show): the launcher's cycle numbers against the harness's attempt numbers
    (NVRx 0.7 hands each cycle's workers its round as TORCHELASTIC_RESTART_COUNT: the attempt)."""
    try:
        records = read_cycle_records(folder)
    except CycleRecordError as e:
        return False, f"a cycle record cannot be read ({e})"
    cycles = [r.cycle for r in records]
    seen = sorted(set(attempts))
    text = f"launcher cycles {_span(cycles)}, harness attempts {_span(seen)}"
    open_ = [r.cycle for r in records if not r.end]
    if not records:
        return False, f"no cycle record in {folder} ({text})"
    if open_:
        return False, f"{text}; cycle(s) {open_} never closed (no cycle_end_time)"
    if cycles != seen:
        only_l, only_h = sorted(set(cycles) - set(seen)), sorted(set(seen) - set(cycles))
        return False, f"DISAGREE: {text}; only the launcher's: {only_l or 'none'}, only the harness's: {only_h or 'none'}"
    return True, f"agree: {text}"


def _span(numbers: list[int]) -> str:
    return "none" if not numbers else ", ".join(str(n) for n in numbers) + f" ({len(numbers)})"


@dataclass(frozen=True)
class ProgressStop:
    """What the launcher's progress tracker said: cycles judged without progress (in order), with progress,
    whether it stopped the job, whether it ever saw an iteration."""

    no_progress: tuple[int, ...]
    progress: tuple[int, ...]
    stopped: bool
    iterations_reported: bool

    @property
    def cycles_run(self) -> int | None:
        """Cycles the job ran when the tracker stopped it (None: it did not)."""
        judged = (*self.no_progress, *self.progress)
        return max(judged) + 1 if self.stopped and judged else None


def progress_stop(log: str) -> ProgressStop:
    return ProgressStop(
        no_progress=tuple(int(m["cycle"]) for m in NO_PROGRESS.finditer(log)),
        progress=tuple(int(m["cycle"]) for m in PROGRESS.finditer(log)),
        stopped=STOPPED in log,
        iterations_reported=NOT_REPORTED not in log,
    )


def restart_time_saved_s(max_restarts: int, restarts: int | None, wall_s: float | None) -> float | None:
    """What stopping saved against burning every restart: the restarts left unused times the mean cycle so
    far (each further cycle would have failed the same way, at the same cost). None without a stop."""
    if restarts is None or wall_s is None:
        return None
    return max(max_restarts - restarts, 0) * wall_s / (restarts + 1)


def failed_health_check(log: str) -> str:
    """The first health check the launcher logged as failed before a rendezvous ("Storage path health
    check"), or "none"."""
    found = HEALTH_FAILED.search(log)
    return found["check"] if found else "none"


@dataclass(frozen=True)
class RemainingProcess:
    """One process the launcher found alive in a worker's process group after stopping the workers."""

    pid: int
    ppid: int
    pgid: int
    name: str
    status: str
    """psutil's status as the launcher saw it (``running``, ``sleeping``, ``disk-sleep``, ...)."""
    cmdline: str


@dataclass(frozen=True)
class RemainingReport:
    """One "Found N remaining processes" warning: the count the launcher gave and the processes it listed
    (at most 20; ``count`` says how many there were)."""

    line: int
    """Its line number in the launcher's log (1-based)."""
    count: int
    processes: tuple[RemainingProcess, ...]


def remaining_processes(log: str) -> list[RemainingReport]:
    """Every remaining-processes warning in the launcher's log, with the processes listed under it (each
    ``PID=...`` line belongs to the warning before it: other output may come between them)."""
    found: list[tuple[int, int, list[RemainingProcess]]] = []
    for number, text in enumerate(log.splitlines(), 1):
        if header := REMAINING.search(text):
            found.append((number, int(header["count"]), []))
        elif found and (listed := REMAINING_PROCESS.search(text)):
            found[-1][2].append(RemainingProcess(int(listed["pid"]), int(listed["ppid"]), int(listed["pgid"]), listed["name"],
                                                 listed["status"], listed["cmdline"]))
    return [RemainingReport(line, count, tuple(processes)) for line, count, processes in found]


def remaining_check(reports: list[RemainingReport], leftovers: list[dict]) -> tuple[bool, str]:
    """(agree, what both sides show): the processes the launcher listed after its stops against those the
    harness found alive at an attempt's start (``leftovers_at_start`` events, as the runner wrote them).

    A process the launcher listed that was gone by the next start agrees (its list is of the moment after
    its SIGKILL, when a process may still be dying); one the harness found at a start that the launcher did
    not list is a disagreement: a leftover the launcher missed (outside the workers' process groups)."""
    listed = {p.pid: f"{p.name}, {p.status}" for r in reports for p in r.processes}
    found = {int(p["pid"]): str(p.get("name", "?")) for e in leftovers for p in e.get("processes", ())}
    unlisted = sum(r.count - len(r.processes) for r in reports)
    both = {pid: name for pid, name in found.items() if pid in listed}
    gone = {pid: state for pid, state in listed.items() if pid not in found}
    missed = {pid: name for pid, name in found.items() if pid not in listed}
    text = (f"launcher listed {_procs(listed)} in {len(reports)} warning(s)"
            + (f" and counted {unlisted} more without listing them" if unlisted else "")
            + f"; harness found {_procs(found)} at {len(leftovers)} attempt start(s); seen by both: {_procs(both)}; "
            f"listed by the launcher, gone by the next start: {_procs(gone)}; missed by the launcher: {_procs(missed)}")
    if missed and not unlisted:
        return False, f"DISAGREE: {text}"
    if missed:
        return False, f"DISAGREE (the launcher's list is cut): {text}"
    return True, f"agree: {text}"


def _procs(by_pid: dict[int, str]) -> str:
    return "none" if not by_pid else ", ".join(f"{pid} ({name})" for pid, name in sorted(by_pid.items()))
