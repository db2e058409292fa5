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
- what each kind sends, and when it follows up, is its class's (chaos/faults/signals/planned.py).

The faults are driven by ``tick()``, which the launch's watch loop calls every 0.1 s, and every signal is
stamped as a ``signal_sent`` runner event (the first one of a fault also as ``fault_injected``).

A fault fires only at processes that exist: once due, it waits for its targets (every rank it names, or
every rank of the world for ``all``, each a worker of the launcher round the run is in, not a dying one
of the round before; for ``launcher``, the launcher), and fires when they are all there. A fault whose
targets do not appear within ``TARGET_WAIT_S``, or before its attempt or the run ends, is not injected:
the runner writes ``fault_missed`` with the reason, and the run fails (chaos/judge/verdicts.py).

Once a fault is struck or given up, ``_struck`` marks it in the run folder (``struck/<fault_id>``): our
trainer's ranks wait after an ``at_step`` fault's step until that mark is there (chaos/hooks/injector.py), so
the fault strikes at its step however long the look in /proc took.
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

from chaos.faults.outside import Armed, SignalFault
from chaos.faults.plan import PlannedFault
from chaos.supervise.attempts import AttemptTracker
from chaos.supervise.procs import alive, group_alive, launcher_pid, proc_environ, session_pids, worker_pids
from runlog import names
from runlog.env import RUN_ID_VAR
from runlog.layout import RunFolder
from runlog.log import EventLog
from runlog.reader import EventTail
from runlog.records import FaultInjected, FaultMissed, ObservedStep, SignalSent

TARGET_WAIT_S = 60.0
"""How long a due fault waits for its targets: a launch's ranks start in 5-10 s on a CPU machine, more on a
loaded one, and a restart takes a few seconds more."""


class EventSteps:
    """Steps from the trainer's own ``step`` events (every rank's file)."""

    def __init__(self, run_dir: Path):
        self.tail = EventTail(run_dir, "rank-*.jsonl")

    def poll(self) -> list[tuple[int, int]]:
        """(attempt, iteration) of each step event written since the last poll."""
        return [(int(e["attempt"]), int(e["iteration"])) for e in self.tail.poll() if e["event"] == names.STEP]


class EpochSteps:
    """Global, monotone steps from a counter that starts again every epoch (``epoch: E iter: I``).

    An epoch's length is learned from its lines: its largest iteration, counted from the smallest iteration
    seen in any epoch (0 or 1); an epoch never seen counts as long as the longest one seen. A step is the
    lengths of the epochs before its own (from the first epoch seen), plus its place in its epoch: with
    every epoch seen in full, the same number whichever attempt prints it, so a resumed run continues it.
    """

    def __init__(self) -> None:
        self.last: dict[int, int] = {}
        """Each epoch's largest iteration seen."""
        self.first: int | None = None

    def step(self, epoch: int, iteration: int) -> int:
        self.first = iteration if self.first is None else min(self.first, iteration)
        self.last[epoch] = max(iteration, self.last.get(epoch, iteration))
        sizes = {e: last - self.first + 1 for e, last in self.last.items() if e < epoch}
        longest = max(sizes.values(), default=0)
        before = sum(sizes.get(e, longest) for e in range(min(self.last), epoch))
        return before + iteration - self.first + 1


class LogSteps:
    """Steps from the job's output lines, for a command that writes no events.

    The launch hands it every output line in order (``Launch.on_line``) with the attempt of the workers that
    wrote it, so a step a surviving rank prints after the restart line, while its agent stops it, is credited
    to the attempt it belongs to, never to the next one. Each
    match becomes a ``step`` event (rank 0, ``observed: true``, no step time) in ``events/observed.jsonl``;
    with an ``epoch`` group the ``step`` group counts within the epoch and the step is global
    (:class:`EpochSteps`). A match whose groups are no numbers is no step.
    """

    def __init__(self, run_dir: Path, pattern: str):
        self.pattern = re.compile(pattern)
        self.log = EventLog(run_dir, "observed", rank=0, attempt=0)  # each step states its own
        self.epochs = EpochSteps() if "epoch" in self.pattern.groupindex else None
        self._found: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()

    def line(self, line: str, attempt: int) -> None:
        """One output line of the job, written in `attempt` (called from the launch's reader thread)."""
        m = self.pattern.search(line)
        if m is None:
            return
        try:
            step = int(m["step"])
            loss = float(m["loss"]) if "loss" in self.pattern.groupindex and m["loss"] else math.nan
            if self.epochs is not None:
                step = self.epochs.step(int(m["epoch"]), step)
        except (TypeError, ValueError):
            return
        self.log.write(ObservedStep(step, loss, attempt=attempt))
        self._found.put((attempt, step))

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
        steps: StepSource, world_size: int | None = None, *, run_dir: Path,
    ):
        self.events, self.attempts, self.run_id, self.steps = events, attempts, run_id, steps
        self.run_dir, self.folder = run_dir, RunFolder(run_dir)
        self.world_size = world_size
        """The ranks a signal fault aimed at all of them waits for; the subclasses that fire other kinds
        (node, Slurm) leave it out."""
        self.armed = [Armed(f) for f in faults if isinstance(f, SignalFault)]
        self.last_step: dict[int, int] = {}
        self.attempt_since: dict[int, float] = {}

    def tick(self) -> None:
        now = time.monotonic()
        self._observe()
        self.attempt_since.setdefault(self.attempts.running(), now)
        for armed in self.armed:
            if armed.fired_at is None and not armed.missed:
                self._try(armed, now)
            elif armed.next_at is not None and now >= armed.next_at:
                self._follow_up(armed, now)

    def _observe(self) -> None:
        """Takes in the steps written since the last look."""
        for attempt, step in self.steps.poll():
            self.last_step[attempt] = max(step, self.last_step.get(attempt, 0))
            self.attempts.ranks_in(attempt)

    def _seen_at_strike(self, attempt: int) -> int | None:
        """The newest step of `attempt` written before the fault strikes: on a loaded machine, finding the
        targets in /proc can take a second, in which a fast run goes on by several steps (the fault's
        ``iteration`` names where the run was when it struck, not when the fault became due)."""
        self._observe()
        return self.last_step.get(attempt)

    def _try(self, armed: Armed, now: float) -> None:
        """Fire a due fault at its targets once they are all there; give it up past the wait."""
        fault = armed.fault
        if armed.due_since is None:
            if not self._due(fault, now):
                return
            armed.due_since = now
        elif fault.attempt != self.attempts.running():
            self._miss(armed, f"attempt {fault.attempt} ended before {self._wanted(fault)} had a process")
            return
        targets = self._targets(fault)
        if targets is not None:
            self._fire(armed, now, targets)
            self._struck(fault)
        elif now - armed.due_since > TARGET_WAIT_S:
            self._miss(armed, f"no process of {self._wanted(fault)} within {TARGET_WAIT_S:g} s of its trigger")

    def _due(self, fault: PlannedFault, now: float) -> bool:
        if fault.attempt != self.attempts.running():
            return False
        if fault.at_step is not None:
            return self.last_step.get(fault.attempt, 0) >= fault.at_step
        return now - self.attempt_since[fault.attempt] >= fault.delay_s

    def _wanted(self, fault: PlannedFault) -> str:
        """What the fault strikes, in words."""
        if fault.target is not None:
            return "the launcher" if fault.target == "launcher" else "every rank"
        ranks = fault.ranks or [fault.rank]
        return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"

    def _targets(self, fault: SignalFault) -> list[int] | None:
        """The pids to signal, None while some target has no process (of the round the run is in)."""
        if fault.target == "launcher":
            pid = launcher_pid(self.run_id)
            return None if pid is None else [pid]
        ranks = list(range(self.world_size)) if fault.target == "all" else fault.ranks or [fault.rank]
        workers = worker_pids(self.run_id, ranks, round_=self.attempts.launcher())
        return sorted(workers) if set(workers.values()) == set(ranks) else None

    def _fire(self, armed: Armed, now: float, targets: list[int]) -> None:
        fault = armed.fault
        armed.fired_at, armed.pids = now, targets
        self.events.write(FaultInjected(
            fault.type, fault.fault_id, f"{fault.target or 'ranks'} pids {armed.pids}",
            self._seen_at_strike(fault.attempt), target_rank=fault.rank, attempt=fault.attempt, params=fault.params(),
        ))
        fault.fire(armed, self, now)

    def _miss(self, armed: Armed, reason: str) -> None:
        fault, armed.missed = armed.fault, True
        self.events.write(FaultMissed(
            fault.type, fault.fault_id, reason, target_rank=fault.rank, attempt=fault.attempt,
            target_node=getattr(fault, "target_node", None),
        ))
        self._struck(fault)

    def _struck(self, fault: PlannedFault) -> None:
        """Lets the ranks that wait at the fault's step go on (chaos/hooks/injector.py): it is struck, or given up."""
        mark = self.folder.struck(fault.fault_id)
        mark.parent.mkdir(exist_ok=True)
        mark.touch()

    def _follow_up(self, armed: Armed, now: float) -> None:
        armed.fault.follow_up(armed, self, now)

    def survivors(self, armed: Armed) -> list[int]:
        if armed.fault.process_group:  # a group outlives its leader (a dead rank's orphaned workers)
            return [pid for pid in armed.pids if group_alive(pid)]
        survivors = [pid for pid in armed.pids if alive(pid)]
        if armed.fault.target == "launcher" and survivors:
            survivors = session_pids(self.run_id, survivors[0])
        return survivors

    def environ(self, pid: int) -> dict[str, str]:
        return proc_environ(pid)

    def send(self, pids: list[int], sig: signal.Signals, group: bool = False) -> None:
        """`sig` to each of `pids` still the run's, or (`group`) to the process group it leads: ``target``
        names the pid either way. A follow-up comes seconds later, when a dead target's pid may be another
        process's."""
        for pid in pids:
            if proc_environ(pid).get(RUN_ID_VAR) != self.run_id:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig) if group else os.kill(pid, sig)
                self.events.write(SignalSent(sig.name, pid, pid=pid, attempt=self.attempts.running(), group=group or None))

    def close(self) -> None:
        """Leave nothing stopped: a duty cycle cut short by the job's end still owes its SIGCONT. A fault
        still waiting for its targets missed them."""
        for armed in self.armed:
            if armed.due_since is not None and armed.fired_at is None and not armed.missed:
                self._miss(armed, f"the run ended before {self._wanted(armed.fault)} had a process")
            if armed.stopped:
                self.send([pid for pid in armed.pids if alive(pid)], signal.SIGCONT)
                armed.stopped = False

