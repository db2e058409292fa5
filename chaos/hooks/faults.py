"""The fault kinds fired inside the ranks: each one a planned-fault record and how it strikes.

The injector (chaos/hooks/injector.py) hands every hook of the trainer to this rank's faults; a kind
overrides the hooks it strikes in and acts through the injector (:class:`Rank`): log the fault, kill or stop
its own process, arm a slowdown. Every event is written and flushed before the fault, so it survives it.

Loss faults (nan_loss, spiky_loss) corrupt the loss of every micro-batch before its backward, so the
gradients are as wrong as the loss and a rerun really recomputes. ``transient``: only the first computation
of the step in its attempt (the rerun in place is clean). ``persistent``: every computation on the faulty
node, the first launch's node identity recorded in the plan, in every attempt; a relaunch under another
``CHAOS_NODE_ID`` computes clean results, as another machine would.
"""

from __future__ import annotations

import shutil
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from chaos.schema.plan import PlannedFault, Side
from trainer.components import CheckpointCandidate, LoadPhase, SavePhase, TrainContext

if TYPE_CHECKING:
    import torch


class InjectedFault(RuntimeError):
    """The exception an `exception` fault raises inside the step."""


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


@dataclass(frozen=True)
class CollectiveHang(RankFault):
    """The rank stops in the gradient all-reduce of its step, its peers waiting inside it."""

    type = "collective_hang"

    def in_allreduce(self, rank: Rank, step: int, bucket: int) -> None:
        import torch
        import torch.distributed as dist

        if step != self.at_step:
            return
        rank.announce(self, step, f"inside the gradient all-reduce (bucket {bucket})")
        # The rank blocks in a real receive on the training group that no peer answers, as a rank stuck
        # inside a collective: in C++, where neither its peers (waiting in the all-reduce it never joins)
        # nor an asynchronous raise can reach it, and its sockets stay open. Only the group's abort ends it
        # (NCCL: NVRx's in-process restart aborts the communicators), or the kill of the process (gloo has
        # no abort).
        peer = (rank.rank + 1) % rank.ctx.world_size
        aborted = f"collective aborted: rank {rank.rank} hung in the all-reduce of step {step}"
        try:
            dist.recv(torch.empty(1, device=rank.ctx.device), src=peer, tag=HANG_TAG)
        except Exception as e:
            raise RuntimeError(aborted) from e
        raise RuntimeError(aborted)


HANG_TAG = 0x4841
"""The tag of the hung rank's receive, which nothing in the trainer sends."""


@dataclass(frozen=True)
class FaultDuringCheckpoint(RankFault):
    """SIGKILL while a checkpoint is in flight: inside the sync save of `at_step`, between the issue and the
    seal of its async save, inside this rank's write of the local save of `at_step`, or inside the checkpoint
    load of `attempt`."""

    type = "fault_during_checkpoint"
    during: Literal["save", "local_save", "load"]

    def on_local_save(self, rank: Rank, phase: SavePhase, iteration: int) -> None:
        if phase is SavePhase.WRITING and self.during == "local_save" and iteration == self.at_step:
            rank.kill(self, iteration, f"inside the local save of step {iteration}")

    def on_save(self, rank: Rank, phase: SavePhase, iteration: int) -> None:
        inside = phase is SavePhase.BEGIN and not rank.ctx.async_saves and self.during == "save"
        if inside and iteration == self.at_step:
            rank.kill(self, iteration, f"inside the save of step {iteration}")

    def before_step(self, rank: Rank, iteration: int) -> None:
        # An async save returns at once; it is in flight until it is sealed. The next step starts
        # microseconds after the save was issued, long before its writes (~0.1 s) finish.
        if self.at_step == iteration - 1 and self.at_step in rank.in_flight:
            rank.kill(self, self.at_step, f"async save of step {self.at_step} in flight")

    def on_load(self, rank: Rank, phase: LoadPhase, checkpoints: Sequence[CheckpointCandidate]) -> None:
        if phase is LoadPhase.READ and self.during == "load":
            rank.kill(self, None, "inside the checkpoint load")


@dataclass(frozen=True)
class CheckpointCorrupt(RankFault):
    """The newest checkpoint truncated or garbled before the trainer chooses what to load."""

    type = "checkpoint_corrupt"
    mode: Literal["truncate", "garble"]

    def on_load(self, rank: Rank, phase: LoadPhase, checkpoints: Sequence[CheckpointCandidate]) -> None:
        from chaos.hooks.storage import corrupt_newest

        if phase is not LoadPhase.CHOOSE:
            return
        victim = corrupt_newest(checkpoints, self.mode)
        if victim is None:
            rank.miss(self, "no checkpoint to corrupt at the load")
        else:
            rank.announce(self, None, f"{self.mode} {victim}")


@dataclass(frozen=True)
class LocalCheckpointLost(RankFault):
    """The rank's node-local checkpoint folder removed before the ranks look for local checkpoints."""

    type = "local_checkpoint_lost"

    def on_local_load(self, rank: Rank, folder: Path) -> None:
        files = sum(1 for p in folder.rglob("*") if p.is_file())
        rank.announce(self, None, f"removed {folder} ({files} files)")
        shutil.rmtree(folder, ignore_errors=True)


@dataclass(frozen=True)
class SlowRank(RankFault):
    """From its step on, each forward pass `factor` times as long or `seconds` more per step (CPU), or a
    competing CUDA stream on the rank's device (GPU)."""

    type = "slow_rank"
    factor: float | None
    seconds: float | None

    def before_step(self, rank: Rank, iteration: int) -> None:
        from chaos.hooks.slow_rank import Slowdown as Amount
        from chaos.hooks.slow_rank import slow_down

        if iteration == self.at_step:
            rank.announce(self, iteration, f"from step {iteration}: {self.params()}")
            rank.arm(slow_down(rank.ctx.device, Amount(self.factor, self.seconds), rank.ctx.microbatches))


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


RANK_FAULTS: tuple[type[RankFault], ...] = (
    RankKilled, RankHung, ExceptionFault, CollectiveHang, FaultDuringCheckpoint, CheckpointCorrupt, SlowRank,
    NanLoss, SpikyLoss, LocalCheckpointLost,
)
"""Every kind the injector fires (the plan's other kinds are the supervisor's)."""
