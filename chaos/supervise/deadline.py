"""A launch's deadline clock: its wall time less what it waited for each attempt's workers to start.

The deadline is the harness's net for a run that nothing else ends (a hang nobody detects), so a busy
machine must not trip it. Yet an attempt's start-up (spawn, the imports of torch and DCP, rendezvous,
model build, checkpoint load) is the part of a run that grows most with load: on a loaded two-core CI
machine a restart's workers took 54 s to reach their first step where alone they take 4 s, and a run
that recovered correctly was killed at its deadline. So each attempt's start-up, from its launch or its
restart line to the first step any rank logs in it, is not counted, up to ``deadline_s`` of start-up in
all: workers that never start are still killed, at twice the deadline at most. A ``command`` whose steps
are not events (no ``step_pattern``, no adapter) has no first step to see, so its whole wait is granted
up to that cap.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from runlog import names
from runlog.reader import EventTail


@dataclass
class DeadlineClock:
    deadline_s: float
    run_dir: Path
    start: float = 0.0
    """When the launch began (time.monotonic())."""
    granted_s: float = 0.0
    """Start-up of the attempts that reached their first step (or were replaced by a restart)."""
    _attempt: int = 0
    _starting_since: float | None = None
    """When the attempt now starting began; None once it has stepped."""
    _tail: EventTail = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._tail = EventTail(self.run_dir)  # rank files and observed.jsonl carry steps; the runner's none

    def launched(self, attempt: int, now: float) -> None:
        """The launch begins now, its workers in `attempt`."""
        self.start = now
        self.attempt_began(attempt, now)

    def attempt_began(self, attempt: int, now: float) -> None:
        """A launch or a restart line: `attempt`'s workers start now (an attempt still starting ends here)."""
        with self._lock:
            self._stepped(now)
            self._attempt, self._starting_since = attempt, now

    def counted(self, now: float) -> float:
        """Seconds of the launch that count against its deadline, at `now`."""
        steps = [e for e in self._tail.poll() if e["event"] == names.STEP]
        with self._lock:
            for e in steps:
                if self._starting_since is not None and e["attempt"] >= self._attempt:
                    self._stepped(max(self._starting_since, min(e["mono"], now)))
            starting = 0.0 if self._starting_since is None else now - self._starting_since
            return now - self.start - min(self.deadline_s, self.granted_s + starting)

    def _stepped(self, at: float) -> None:
        if self._starting_since is not None:
            self.granted_s += at - self._starting_since
            self._starting_since = None
