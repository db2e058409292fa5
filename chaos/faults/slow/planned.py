"""The rank computes slower from its step on (chaos/faults/slow/slowdown.py does the slowing)."""

from __future__ import annotations

from dataclasses import dataclass

from chaos.faults.in_rank import Rank, RankFault


@dataclass(frozen=True)
class SlowRank(RankFault):
    """From its step on, each forward pass `factor` times as long or `seconds` more per step (CPU), or a
    competing CUDA stream on the rank's device (GPU)."""

    type = "slow_rank"
    factor: float | None
    seconds: float | None

    def before_step(self, rank: Rank, iteration: int) -> None:
        from chaos.faults.slow.slowdown import Slowdown as Amount
        from chaos.faults.slow.slowdown import slow_down

        if iteration == self.at_step:
            rank.announce(self, iteration, f"from step {iteration}: {self.params()}")
            rank.arm(slow_down(rank.ctx.device, Amount(self.factor, self.seconds), rank.ctx.microbatches))
