"""The rank ends or stops itself, at its step or after its delay: SIGKILL, SIGSTOP (as Bridge's simulate_fault
does), or a Python exception raised in the step."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import ClassVar

from chaos.faults.in_rank import Rank, RankFault


class InjectedFault(RuntimeError):
    """The exception an `exception` fault raises inside the step."""


@dataclass(frozen=True)
class _SignalSelf(RankFault):
    """The rank sends itself a signal at its step or after its delay (as Bridge's simulate_fault does)."""

    signal: ClassVar[signal.Signals]

    def before_step(self, rank: Rank, iteration: int) -> None:
        if iteration == self.at_step:
            self._fire(rank, iteration, f"at step {iteration}")

    def after_delay(self, rank: Rank, iteration: int) -> None:
        self._fire(rank, iteration, f"after {self.delay_s:.2f}s")

    def _fire(self, rank: Rank, iteration: int, detail: str) -> None:
        print(f"FT: Simulating fault: {self.type}; rank to fail: {rank.rank}", flush=True)
        rank.kill(self, iteration, detail, self.signal)


@dataclass(frozen=True)
class RankKilled(_SignalSelf):
    """SIGKILL (a crashed process)."""

    type = "rank_killed"
    signal = signal.SIGKILL


@dataclass(frozen=True)
class RankHung(_SignalSelf):
    """SIGSTOP (a hung process: alive, silent)."""

    type = "rank_hung"
    signal = signal.SIGSTOP


@dataclass(frozen=True)
class ExceptionFault(RankFault):
    """A Python exception raised in the step: the rank exits 1 (or its in-process iteration fails)."""

    type = "exception"
    message: str

    def before_step(self, rank: Rank, iteration: int) -> None:
        if iteration == self.at_step:
            rank.announce(self, iteration, self.message)
            raise InjectedFault(f"{self.message} (rank {rank.rank}, step {iteration})")
