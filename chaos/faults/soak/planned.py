"""A soak's fault as its rank fires it: the kind drawn for it, after its gap from the attempt's training start."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from chaos.faults.in_rank import Rank, RankFault

SIGNALS = {"rank_killed": signal.SIGKILL, "rank_hung": signal.SIGSTOP}
"""The kinds a soak mixes, and the signal the rank sends itself for each (as chaos/faults/process fires them)."""


@dataclass(frozen=True)
class SoakFault(RankFault):
    """One fault of a soak: ``kind`` (rank_killed or rank_hung), ``delay_s`` after its attempt's training starts."""

    type = "soak"
    kind: str

    def after_delay(self, rank: Rank, iteration: int) -> None:
        rank.kill(self, iteration, f"{self.kind} after {self.delay_s:.2f}s", SIGNALS[self.kind])
