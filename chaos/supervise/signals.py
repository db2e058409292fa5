"""Process faults from outside: the runner sends real signals to the real pids of a running job.

This is how a scheduler preempts (SIGTERM, a grace period, SIGKILL), how an OOM killer or node agent
kills (SIGKILL), how a process freezes (SIGSTOP) and how contention slows one (SIGSTOP/SIGCONT duty
cycles). Nothing here needs the job's cooperation, so it works on any training command, ours or not:

- the targets are found in /proc: workers carry the run's marker variable and the ``RANK`` torchelastic
  gives them; the launcher is the leader of the run's process session;
- steps are observed from the trainer's ``step`` events, or, for a ``command`` that writes none, from
  its output lines matched by the scenario's ``step_pattern`` (the launch's reader hands them over in
  order; each match is also written as a ``step`` event, with ``observed: true``, so the timeline metrics
  apply to any trainer), or read by the scenario's ``adapter`` (chaos/supervise/foreign.py);
- what each kind sends, and when it follows up, is its class's (chaos/supervise/faults.py).

The faults are driven by ``tick()``, which the launch's watch loop calls every 0.1 s, and every signal is
stamped as a ``signal_sent`` runner event (the first one of a fault also as ``fault_injected``).
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import re
import signal
import time
from pathlib import Path
from typing import Protocol

from chaos.schema.plan import PlannedFault
from chaos.supervise.attempts import AttemptTracker
from chaos.supervise.faults import Armed, SignalFault
from chaos.supervise.procs import alive, launcher_pid, session_pids, worker_pids
from runlog import names
from runlog.log import EventLog
from runlog.reader import EventTail
from runlog.records import FaultInjected, ObservedStep, SignalSent


class EventSteps:
    """Steps from the trainer's own ``step`` events (every rank's file)."""

    def __init__(self, run_dir: Path):
        self.tail = EventTail(run_dir, "rank-*.jsonl")

    def poll(self) -> list[tuple[int, int]]:
        """(attempt, iteration) of each step event written since the last poll."""
        return [(int(e["attempt"]), int(e["iteration"])) for e in self.tail.poll() if e["event"] == names.STEP]


class LogSteps:
    """Steps from the job's output lines, for a command that writes no events.

    The launch hands it every output line in order (``Launch.on_line``), after a restart line has moved the
    attempt tracker, so a step printed just before a restart is never credited to the next attempt. Each
    match becomes a ``step`` event (rank 0, ``observed: true``) in ``events/observed.jsonl``.
    """

    def __init__(self, run_dir: Path, pattern: str, attempts: AttemptTracker):
        self.pattern, self.attempts = re.compile(pattern), attempts
        self.log = EventLog(run_dir, "observed", rank=0, attempt=attempts.launcher)
        self._found: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()

    def line(self, line: str) -> None:
        """One output line of the job (called from the launch's reader thread)."""
        m = self.pattern.search(line)
        if m is None:
            return
        step = int(m["step"])
        loss = float(m["loss"]) if "loss" in self.pattern.groupindex and m["loss"] else math.nan
        self._found.put((self.log.write(ObservedStep(step, loss))["attempt"], step))

    def poll(self) -> list[tuple[int, int]]:
        """(attempt, step) of each step line since the last poll."""
        return drain(self._found)

    def close(self) -> None:
        self.log.close()


def drain(found: queue.SimpleQueue[tuple[int, int]]) -> list[tuple[int, int]]:
    """What the launch's reader thread put in `found` since the last call (the watch loop takes it)."""
    items = []
    while not found.empty():
        items.append(found.get())
    return items


class StepSource(Protocol):
    """Where the runner learns the ranks' steps: their events, a command's lines (``LogSteps``), or a
    foreign trainer's adapter (chaos/supervise/foreign.py)."""

    def poll(self) -> list[tuple[int, int]]: ...


class ExternalFaults:
    """Fires the plan's signal faults from the runner, one tick at a time."""

    def __init__(
        self, faults: list[PlannedFault], events: EventLog, attempts: AttemptTracker, run_id: str,
        steps: StepSource,
    ):
        self.events, self.attempts, self.run_id, self.steps = events, attempts, run_id, steps
        self.armed = [Armed(f) for f in faults if isinstance(f, SignalFault)]
        self.last_step: dict[int, int] = {}
        self.attempt_since: dict[int, float] = {}

    def tick(self) -> None:
        now = time.monotonic()
        for attempt, step in self.steps.poll():
            self.last_step[attempt] = max(step, self.last_step.get(attempt, 0))
            self.attempts.ranks_in(attempt)
        self.attempt_since.setdefault(self.attempts.running(), now)
        for armed in self.armed:
            if armed.fired_at is None and self._due(armed.fault, now):
                self._fire(armed, now)
            elif armed.next_at is not None and now >= armed.next_at:
                self._follow_up(armed, now)

    def _due(self, fault: PlannedFault, now: float) -> bool:
        if fault.attempt != self.attempts.running():
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
            survivors = session_pids(self.run_id, survivors[0])
        return survivors

    def send(self, pids: list[int], sig: signal.Signals) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
                self.events.write(SignalSent(sig.name, pid, pid=pid, attempt=self.attempts.running()))

    def close(self) -> None:
        """Leave nothing stopped: a duty cycle cut short by the job's end still owes its SIGCONT."""
        for armed in self.armed:
            if armed.stopped:
                self.send([pid for pid in armed.pids if alive(pid)], signal.SIGCONT)
                armed.stopped = False

