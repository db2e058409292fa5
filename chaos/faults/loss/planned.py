"""The rank's loss corrupted before its backward: NaN, or a spike.

Loss faults corrupt the loss of every micro-batch before its backward, so the gradients are as wrong as the
loss and a rerun really recomputes. ``transient``: only the first computation of the step in its attempt (the
rerun in place is clean). ``persistent``: every computation on the faulty node, the first launch's node
identity recorded in the plan, in every attempt; a relaunch under another ``CHAOS_NODE_ID`` computes clean
results, as another machine would."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from chaos.faults.in_rank import Rank, RankFault

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class _LossFault(RankFault):
    persistence: Literal["transient", "persistent"]
    faulty_node: str | None
    """Persistent: the node identity the faulty hardware is (the first launch's); None for transient."""

    def fires_in(self, attempt: int) -> bool:
        return self.persistence == "persistent" or self.attempt == attempt

    def on_loss(self, rank: Rank, iteration: int, computation: int, loss: torch.Tensor) -> torch.Tensor:
        active = rank.node == self.faulty_node if self.persistence == "persistent" else computation == 0
        if iteration != self.at_step or not active:
            return loss
        if rank.first_time((self.fault_id, iteration, computation)):
            rank.announce(self, iteration, f"{self.persistence}, computation {computation} on {rank.node}")
        return loss * self.multiplier()

    def multiplier(self) -> float:
        raise NotImplementedError


@dataclass(frozen=True)
class NanLoss(_LossFault):
    """The loss becomes NaN (and so do the gradients)."""

    type = "nan_loss"

    def multiplier(self) -> float:
        return float("nan")


@dataclass(frozen=True)
class SpikyLoss(_LossFault):
    """The loss multiplied by `factor`."""

    type = "spiky_loss"
    factor: float

    def multiplier(self) -> float:
        return self.factor
