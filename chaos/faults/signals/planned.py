"""Signals from outside, to real pids of the job: what each kind sends first and what follows."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from chaos.faults.outside import Armed, SignalFault, Signals


@dataclass(frozen=True)
class Sigterm(SignalFault):
    """Preemption: SIGTERM, then SIGKILL to whatever is still alive `grace_s` seconds later."""

    type = "sigterm"
    grace_s: float

    def fire(self, armed: Armed, out: Signals, now: float) -> None:
        out.send(armed.pids, signal.SIGTERM, self.process_group)
        armed.next_at = now + self.grace_s

    def follow_up(self, armed: Armed, out: Signals, now: float) -> None:
        armed.next_at = None  # the grace is over: what is still alive is killed, as a scheduler does
        out.send(out.survivors(armed), signal.SIGKILL, self.process_group)


@dataclass(frozen=True)
class Sigkill(SignalFault):
    type = "sigkill"
    first = signal.SIGKILL


@dataclass(frozen=True)
class Sigstop(SignalFault):
    type = "sigstop"
    first = signal.SIGSTOP


@dataclass(frozen=True)
class DutyCycle(SignalFault):
    """`cycles` rounds of SIGSTOP for `stop_s`, then SIGCONT for `run_s`."""

    type = "duty_cycle"
    stop_s: float
    run_s: float
    cycles: int

    def fire(self, armed: Armed, out: Signals, now: float) -> None:
        self.follow_up(armed, out, now)

    def follow_up(self, armed: Armed, out: Signals, now: float) -> None:
        if armed.stopped:
            out.send(armed.pids, signal.SIGCONT, self.process_group)
            armed.stopped, armed.cycle = False, armed.cycle + 1
            armed.next_at = now + self.run_s if armed.cycle < self.cycles else None
        else:
            out.send(armed.pids, signal.SIGSTOP, self.process_group)
            armed.stopped, armed.next_at = True, now + self.stop_s
