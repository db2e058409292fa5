"""Preemption: Megatron Bridge's DistributedSignalHandler as a Component.

A scheduler preempts a job with SIGTERM, waits a grace period, then SIGKILLs it. The handler installed
here only records the signal: doing work in a signal handler (I/O, collectives) could deadlock the step
it interrupts. After each step the loop asks every component for a stop reason and all-reduces the
answer (``Trainer._stop_reason``), so when any rank received the signal every rank saves a checkpoint at
the same step and exits cleanly, inside the grace period if the save is fast enough.
"""

from __future__ import annotations

import signal
from types import FrameType

from runlog.log import EventLog
from runlog.records import SignalReceived
from trainer.components import Component
from trainer.config import parse_signal


class Preemption(Component):
    """Records the exit signal; asks the loop to save and stop after the step in which it arrived."""

    name = "preemption"

    def __init__(self, signal_name: str, events: EventLog):
        self.signal = parse_signal(signal_name)
        self.events = events
        self.received: signal.Signals | None = None
        self._reported = False
        self._previous = signal.signal(self.signal, self._record)

    def _record(self, signum: int, frame: FrameType | None) -> None:
        self.received = signal.Signals(signum)

    def stop_reason(self, iteration: int) -> str | None:
        if self.received is None:
            return None
        if not self._reported:  # the event is written here, outside the handler
            self.events.write(SignalReceived(self.received.name, iteration))
            self._reported = True
        return "signal"

    def close(self) -> None:
        signal.signal(self.signal, self._previous)
