"""A foreign trainer's output read live by its adapter: every record the adapter gives becomes an event.

A ``command:`` scenario that names an ``adapter:`` (docs/scenarios.md) is judged from what its trainer
prints: the launch hands every output line here in order (``Launch.on_line``, with the attempt of the
workers that wrote it), the adapter (``chaos.adapters.megatron.MegatronLog``) turns the lines into records
(steps, checkpoints, resumes, FT timeouts, faults, rerun decisions, exits, straggler reports), and each
record is written to ``events/observed.jsonl`` as the event docs/events.md names, with ``observed: true``
and ``line`` (its line in launcher.log). The launcher's own lines (a worker's death, a restart, NVRx's
timeouts) are left to the launch, which stamps them itself. The steps also drive the runner's ``at_step``
signal faults (``poll``), so a fault fires at the foreign trainer's own iterations.

Stamps: a record is stamped when its line arrived (as the launch stamps launcher lines), moved back by
what the log itself says where it says more: a fault Megatron-Core's injector announced for a time is
stamped at that time once a line shows the time has come, not at that line.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from pathlib import Path

from chaos.adapters.megatron import MegatronLog, Record
from chaos.adapters.megatron_lines import line_time
from chaos.supervise.signals import drain
from runlog import names
from runlog.log import EventLog
from runlog.records import ObservedEvent

ADAPTERS: dict[str, Callable[[int], MegatronLog]] = {"megatron": MegatronLog}
"""The adapters a scenario can name, each built with the attempt its launch starts in."""
KEPT_LINES = 5000
"""Arrival times kept per launch: a record is given out within a few lines of the line it stands at."""


class AdapterSteps:
    """Feeds a launch's output lines to the scenario's adapter and writes what it gives as observed events.

    One adapter per launch: a line written in an attempt past the adapter's, while the adapter is not between
    a restart line and its rendezvous line (a relaunch: the next launch numbers its attempts on), closes the
    last launch's adapter, whose pending records (an exit announced before its checkpoint) are given out then.
    """

    def __init__(self, run_dir: Path, adapter: str):
        self.make = ADAPTERS[adapter]
        self.log = EventLog(run_dir, "observed", rank=0, attempt=0)  # each record states its own
        self._adapter: MegatronLog | None = None
        self._arrived: dict[int, tuple[float, float, float | None]] = {}
        """Line number of this launch -> (mono, wall) it arrived at, and the time it states."""
        self._lines_before = 0
        """Output lines of earlier launches (launcher.log numbers on across them)."""
        self._found: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()

    def line(self, text: str, attempt: int) -> None:
        """One output line of the job, written in `attempt` (called from the launch's reader thread)."""
        adapter = self._adapter
        if adapter is None or (attempt > adapter.attempt and not adapter.restarting):
            adapter = self._new_launch(attempt)
        self._arrived[adapter.line_no + 1] = (time.monotonic(), time.time(), line_time(text))
        self._arrived.pop(adapter.line_no + 1 - KEPT_LINES, None)
        self._write(adapter.feed(text))

    def poll(self) -> list[tuple[int, int]]:
        """(attempt, iteration) of each step the adapter read since the last poll."""
        return drain(self._found)

    def close(self) -> None:
        """The end of the run: what the last lines left pending (a save that never finished, an exit)."""
        if self._adapter is not None:
            self._write(self._adapter.close())
        self.log.close()

    def _new_launch(self, attempt: int) -> MegatronLog:
        if self._adapter is not None:
            self._write(self._adapter.close())
            self._lines_before += self._adapter.line_no
        self._adapter, self._arrived = self.make(attempt), {}
        return self._adapter

    def _write(self, records: list[Record]) -> None:
        for r in records:
            if r.rank < 0:
                continue  # the launcher's lines: the launch wrote them as it read them
            mono, wall = self._stamp(r)
            self.log.write(ObservedEvent(r.event, {
                **r.fields, "attempt": r.attempt, "wall": wall, "mono": mono, "line": self._lines_before + r.line,
            }))
            if r.event == names.STEP:
                self._found.put((r.attempt, r.fields["iteration"]))

    def _stamp(self, r: Record) -> tuple[float, float]:
        """(mono, wall) of a record: when its line arrived, earlier by as much as the record's own time
        precedes the time that line states."""
        mono, wall, stated = self._arrived.get(r.line) or (time.monotonic(), time.time(), None)
        shift = max(0.0, stated - r.wall) if stated is not None and r.wall is not None else 0.0
        return mono - shift, wall - shift

