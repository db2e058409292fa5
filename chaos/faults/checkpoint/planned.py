"""Checkpoint faults: a kill while a checkpoint is in flight, the newest checkpoint broken, a node's local
checkpoints lost."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from chaos.faults.in_rank import Rank, RankFault
from trainer.components import CheckpointCandidate, LoadPhase, SavePhase


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
        from chaos.faults.checkpoint.storage import corrupt_newest

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
