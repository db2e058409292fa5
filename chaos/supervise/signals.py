"""Process faults from outside: the runner sends real signals to the real pids of a running job.

This is how a scheduler preempts (SIGTERM, a grace period, SIGKILL), how an OOM killer or node agent
kills (SIGKILL), how a process freezes (SIGSTOP) and how contention slows one (SIGSTOP/SIGCONT duty
cycles). Nothing here needs the job's cooperation, so it works on any training command, ours or not:

- the targets are found in /proc: workers carry the run's marker variable and the ``RANK`` torchelastic
  gives them; the launcher is the leader of the run's process session;
- steps are observed from the trainer's ``step`` events, or, for a ``command`` that writes none, from
  its output lines matched by the scenario's ``step_pattern`` (each match is also written as a ``step``
  event, with ``observed: true``, so the timeline metrics apply to any trainer).

Everything is driven by ``tick()``, which the launch's watch loop calls every 0.1 s: no thread of our own,
and every signal is stamped as a ``signal_sent`` runner event (the first one of a fault also as
``fault_injected``).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import time
from pathlib import Path

from chaos.schema.plan import PlannedFault
from chaos.supervise.faults import Armed, SignalFault
from chaos.supervise.launch import classify, marked_pids, marked_processes
from runlog import names
from runlog.layout import RunFolder
from runlog.log import EventLog
from runlog.reader import EventTail, LineTail
from runlog.records import FaultInjected, ObservedStep, Restart, SignalSent


def _proc_status(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) of a live process, None once it is gone."""
    try:
        after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return after_name[0], int(after_name[1])


def alive(pid: int) -> bool:
    """Running or stopped, not a zombie: a zombie accepts signals but can no longer act on them."""
    status = _proc_status(pid)
    return status is not None and status[0] != "Z"


def worker_pids(run_id: str, ranks: list[int] | None = None) -> list[int]:
    """The run's worker processes (those torchelastic gave a RANK), of `ranks` or of every rank.

    A worker's own children inherit its RANK; only the outermost process of each rank is returned.
    """
    workers = {pid: env["RANK"] for pid, env in marked_processes(run_id).items() if env.get("RANK", "").isdigit()}
    chosen = {pid for pid, rank in workers.items() if ranks is None or int(rank) in ranks}
    return sorted(pid for pid in chosen if (_proc_status(pid) or ("", 0))[1] not in chosen)


def launcher_pid(run_id: str) -> int | None:
    """The launcher: the process of the run that leads its own session (the runner started it so)."""
    return next((pid for pid in marked_pids(run_id) if _session_of(pid) == pid), None)


def _session_of(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


class EventSteps:
    """Steps from the trainer's own ``step`` events (every rank's file)."""

    def __init__(self, run_dir: Path):
        self.tail = EventTail(run_dir, "rank-*.jsonl")

    def relaunched(self, attempt: int) -> None:
        """Step events carry their own attempt: nothing to do."""

    def poll(self) -> list[tuple[int, int]]:
        """(attempt, iteration) of each step event written since the last poll."""
        return [(int(e["attempt"]), int(e["iteration"])) for e in self.tail.poll() if e["event"] == names.STEP]


class LogSteps:
    """Steps from the job's output lines (launcher.log), for a command that writes no events.

    Each match becomes a ``step`` event (rank 0, ``observed: true``) in ``events/observed.jsonl``. The
    attempt is counted from the launcher's restart lines in the same log, in order, so a step printed
    just before a restart is never credited to the next attempt.
    """

    def __init__(self, run_dir: Path, pattern: str):
        self.tail = LineTail(RunFolder(run_dir).launcher_log)
        self.pattern = re.compile(pattern)
        self.log = EventLog(run_dir, "observed", rank=0, attempt=0)

    def relaunched(self, attempt: int) -> None:
        self.log.attempt = attempt

    def poll(self) -> list[tuple[int, int]]:
        found = []
        for _, line in self.tail.lines():
            if isinstance(classify(line), Restart):
                self.log.attempt += 1
            m = self.pattern.search(line)
            if m is None:
                continue
            step = int(m["step"])
            loss = float(m["loss"]) if "loss" in self.pattern.groupindex and m["loss"] else math.nan
            self.log.write(ObservedStep(step, loss))
            found.append((self.log.attempt, step))
        return found

    def close(self) -> None:
        self.log.close()


class ExternalFaults:
    """Fires the plan's signal faults from the runner, one tick at a time."""

    def __init__(self, faults: list[PlannedFault], events: EventLog, run_id: str, steps: EventSteps | LogSteps):
        self.events, self.run_id, self.steps = events, run_id, steps
        self.armed = [Armed(f) for f in faults if isinstance(f, SignalFault)]
        self.last_step: dict[int, int] = {}
        self.attempt_since: dict[int, float] = {}

    def tick(self) -> None:
        now = time.monotonic()
        for attempt, step in self.steps.poll():
            self.last_step[attempt] = max(step, self.last_step.get(attempt, 0))
        self.attempt_since.setdefault(self.running_attempt(), now)
        for armed in self.armed:
            if armed.fired_at is None and self._due(armed.fault, now):
                self._fire(armed, now)
            elif armed.next_at is not None and now >= armed.next_at:
                self._follow_up(armed, now)

    def running_attempt(self) -> int:
        """The attempt the ranks are in: the launcher's restart rounds, or a later one their steps carry.

        An in-process restart is an attempt too, which the ranks number and no launcher line announces.
        """
        return max(self.events.attempt, *self.last_step) if self.last_step else self.events.attempt

    def _due(self, fault: PlannedFault, now: float) -> bool:
        if fault.attempt != self.running_attempt():
            return False
        if fault.at_step is not None:
            return self.last_step.get(fault.attempt, 0) >= fault.at_step
        return now - self.attempt_since[fault.attempt] >= fault.delay_s

    def _targets(self, fault: SignalFault) -> list[int]:
        if fault.target == "launcher":
            pid = launcher_pid(self.run_id)
            return [] if pid is None else [pid]
        if fault.target == "all":
            return worker_pids(self.run_id)
        return worker_pids(self.run_id, fault.ranks or [fault.rank])

    def _fire(self, armed: Armed, now: float) -> None:
        fault = armed.fault
        armed.fired_at, armed.pids = now, self._targets(fault)
        self.events.write(FaultInjected(
            fault.type, fault.fault_id, f"{fault.target or 'ranks'} pids {armed.pids}",
            self.last_step.get(fault.attempt), target_rank=fault.rank, attempt=fault.attempt, params=fault.params(),
        ))
        fault.fire(armed, self, now)

    def _follow_up(self, armed: Armed, now: float) -> None:
        armed.fault.follow_up(armed, self, now)

    def survivors(self, armed: Armed) -> list[int]:
        survivors = [pid for pid in armed.pids if alive(pid)]
        if armed.fault.target == "launcher" and survivors:
            survivors = _session_pids(self.run_id, survivors[0])
        return survivors

    def send(self, pids: list[int], sig: signal.Signals) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
                self.events.write(SignalSent(sig.name, pid, pid=pid, attempt=self.running_attempt()))

    def relaunched(self) -> None:
        """The runner launches the job again; its attempts number on from ``events.attempt``."""
        self.steps.relaunched(self.events.attempt)

    def close(self) -> None:
        """Leave nothing stopped: a duty cycle cut short by the job's end still owes its SIGCONT."""
        for armed in self.armed:
            if armed.stopped:
                self.send([pid for pid in armed.pids if alive(pid)], signal.SIGCONT)
                armed.stopped = False


def _session_pids(run_id: str, leader: int) -> list[int]:
    """Every live process of the run in the launcher's session: the launcher and what it started."""
    return [pid for pid in marked_pids(run_id) if _session_of(pid) == leader]
