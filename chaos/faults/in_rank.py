"""What a fault that acts inside a rank is (:class:`RankFault`) and what it acts through (:class:`Rank`).

The injector (chaos/hooks/injector.py) hands every hook of the trainer to its rank's faults; a kind overrides
the hooks it strikes in and acts through the injector: log the fault, kill or stop its own process, arm a
slowdown. Every event is written and flushed before the fault, so it survives it.

Standard library, the plan contract and the trainer's component types only: the ranks import this.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from chaos.faults.plan import PlannedFault, Side
from trainer.components import CheckpointCandidate, LoadPhase, SavePhase, TrainContext

if TYPE_CHECKING:
    import torch


class Slowdown(Protocol):
    """An armed slowdown: a span around each forward pass (nothing on GPU, where a stream competes)."""

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...


class Rank(Protocol):
    """What a fault may do in its rank: the injector, as its faults see it."""

    rank: int
    node: str
    ctx: TrainContext
    in_flight: set[int]
    """Iterations of this rank's async saves issued and not yet sealed."""

    def announce(self, fault: PlannedFault, iteration: int | None, detail: str) -> None:
        """Write its fault_injected event (flushed before the fault strikes)."""
    def miss(self, fault: PlannedFault, reason: str) -> None:
        """Write its fault_missed event: it found nothing to strike, and is not injected."""
    def kill(self, fault: PlannedFault, iteration: int | None, detail: str, sig: signal.Signals = signal.SIGKILL) -> None: ...
    def arm(self, slowdown: Slowdown) -> None: ...
    def first_time(self, key: tuple[Any, ...]) -> bool: ...


@dataclass(frozen=True)
class RankFault(PlannedFault):
    """A fault of one rank; its hooks do nothing unless the kind overrides them."""

    side = Side.RANK

    def fires_in(self, attempt: int) -> bool:
        return self.attempt == attempt

    def after_delay(self, rank: Rank, iteration: int) -> None:
        raise NotImplementedError(f"{self.type} does not fire after a delay")

    def before_step(self, rank: Rank, iteration: int) -> None: ...
    def on_load(self, rank: Rank, phase: LoadPhase, checkpoints: Sequence[CheckpointCandidate]) -> None: ...
    def on_save(self, rank: Rank, phase: SavePhase, iteration: int) -> None: ...
    def on_local_save(self, rank: Rank, phase: SavePhase, iteration: int) -> None: ...
    def on_local_load(self, rank: Rank, folder: Path) -> None: ...

    def on_loss(self, rank: Rank, iteration: int, computation: int, loss: torch.Tensor) -> torch.Tensor:
        return loss

    def in_allreduce(self, rank: Rank, step: int, bucket: int) -> None:
        """Right before the rank's all-reduce of gradient buffer `bucket`."""
