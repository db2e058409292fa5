"""Preemption: Megatron Bridge's DistributedSignalHandler as a Component.

A scheduler preempts a job with SIGTERM, waits a grace period, then SIGKILLs it. The handler installed
here only records the signal: doing work in a signal handler (I/O, collectives) could deadlock the step
it interrupts. After each step the loop asks every component for a stop reason and all-reduces the
answer (``trainer.loop.agree_to_stop``), so when any rank received the signal every rank saves a checkpoint
at the same step and exits cleanly, inside the grace period if the save is fast enough. A signal that comes
while the rank waits in that all-reduce is recorded as it returns; the vote then asks again, so the rank
still reports it.
"""

from __future__ import annotations

import functools
import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

from runlog.log import EventLog
from runlog.records import SignalReceived
from trainer.components import Component, TrainContext
from trainer.config import parse_signal


def _ignore_in_worker(signum: int, frame: FrameType | None) -> None:
    """A data-loader worker's handler: it records nothing anyone reads; the training process saves and stops."""


def _install_in_worker(sig: signal.Signals, worker_id: int) -> None:
    signal.signal(sig, _ignore_in_worker)


def worker_init_fn(signal_name: str) -> Callable[[int], None]:
    """Bridge's data-loader ``worker_init_fn`` (``train.exit_signal_handler_for_dataloader``): each worker
    handles the exit signal as the training process does, so a signal to the whole process group, as a
    scheduler sends it, leaves the workers serving while the training process saves."""
    return functools.partial(_install_in_worker, parse_signal(signal_name))


class Preemption(Component):
    """Records the exit signal; asks the loop to save and stop after the step in which it arrived.

    The handler is installed when training starts, after the resume and after the data-loader workers are
    forked: where Bridge installs it (its ``state.signal_handler`` is created in the loop). A worker therefore
    starts with the default action for the signal, unless ``worker_init_fn`` installs one.
    """

    name = "preemption"

    def __init__(self, signal_name: str, events: EventLog):
        self.signal = parse_signal(signal_name)
        self.events = events
        self.received: signal.Signals | None = None
        self._reported = False
        self._previous: Any = None

    def on_train_start(self, ctx: TrainContext, start_iteration: int) -> None:
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
        if self._previous is not None:
            signal.signal(self.signal, self._previous)
            self._previous = None
