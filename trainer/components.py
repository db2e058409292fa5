"""The trainer's hook points. Each resiliency concern is a Component; a disabled one is simply absent.

A component sees the run through these hooks and the read-only :class:`TrainContext` it gets at the start,
never through the Trainer. Call order, per process:

- loading a checkpoint (before ``on_train_start``): ``on_load(CHOOSE, candidates)`` before the checkpoint is
  chosen (newest first), then ``on_load(READ, [chosen])`` while it is read (its shards are in, nothing is
  applied yet);
- ``on_train_start`` once;
- every step: ``before_step`` -> the step (inside ``section_start/end("step")``; for every computation and
  micro-batch ``before_forward`` -> the forward pass -> ``after_forward``, in reverse order of the
  components so that their spans nest, then ``on_loss``; after the last backward, ``before_grad_reduce`` for
  each gradient buffer, right before its all-reduce) -> ``after_step`` -> ``stop_reason`` (asked a
  second time when the ranks' vote says stop and this rank had no reason, so asking twice must be safe);
- saves run inside the "checkpointing" section: ``on_save(BEGIN)`` once every rank is in the save (its folder
  exists, nothing written; an async save's: as this rank enters it, before its writer makes the folder, since
  nothing of an async save touches the storage in the step), ``on_save(ISSUED)`` once this rank's writes are
  issued (a sync save's are done, an async save's handed to its writer), ``on_save(SEALED)`` once the save is
  complete (for an async save: later, in a later step or at the end; between ISSUED and SEALED the save is in
  flight);
- NVRx local checkpoints (``checkpoint.non_persistent_ckpt_type: local``): before a load,
  ``on_local_load(folder)`` with this node's local folder (before the ranks look for local checkpoints);
  on a step that saves one (inside "checkpointing"), ``on_local_save(BEGIN)`` once every rank is in it,
  ``on_local_save(WRITING)`` inside this rank's write (its file open, its tensor data not yet written), and
  ``on_local_save(SEALED)`` once it is complete on every rank;
- ``close`` once at the end, also after an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch


class SavePhase(str, Enum):
    BEGIN = "begin"
    ISSUED = "issued"
    WRITING = "writing"
    """Local saves only: inside this rank's write."""
    SEALED = "sealed"


class LoadPhase(str, Enum):
    CHOOSE = "choose"
    READ = "read"


class CheckpointCandidate(Protocol):
    """A finished checkpoint the trainer may load."""

    iteration: int
    folder: Path

    def data_files(self) -> list[Path]:
        """Its files, but for the manifest that verifies them."""


@dataclass(frozen=True)
class TrainContext:
    """What a component may know of the run it is part of, handed over once at the start."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    microbatches: int
    """Micro-batches per step on this rank (forward passes per computation of a step)."""
    async_saves: bool



class Component:
    """Base with no-op hooks; a component overrides the hooks it needs."""

    name = "component"

    def on_load(self, phase: LoadPhase, checkpoints: Sequence[CheckpointCandidate]) -> None: ...
    def on_train_start(self, ctx: TrainContext, start_iteration: int) -> None: ...
    def before_step(self, iteration: int) -> None: ...
    def before_forward(self, iteration: int, microbatch: int) -> None: ...
    def after_forward(self, iteration: int, microbatch: int) -> None: ...

    def on_loss(self, iteration: int, computation: int, loss: torch.Tensor) -> torch.Tensor:
        """A micro-batch's loss before its backward; returned as is, or corrupted (the chaos hook).

        `computation` counts this process's computations of the step: 0 first, then the reruns.
        """
        return loss

    def after_step(self, iteration: int, loss: float) -> None: ...
    def section_start(self, name: str) -> None: ...
    def section_end(self, name: str) -> None: ...
    def on_save(self, phase: SavePhase, iteration: int) -> None: ...
    def on_local_save(self, phase: SavePhase, iteration: int) -> None: ...

    def on_local_load(self, folder: Path) -> None:
        """Before the ranks look for local checkpoints: `folder` is this node's local checkpoint folder."""

    def stop_reason(self, iteration: int) -> str | None:
        """A reason to save and stop after this step, or None to go on."""
        return None

    def before_grad_reduce(self, iteration: int, bucket: int) -> None:
        """Right before gradient buffer `bucket` is all-reduced: a rank that stops here leaves its peers
        waiting inside the all-reduce (the chaos hook's collective hang)."""

    def state_dict(self) -> dict[str, Any]:
        """Plain state saved with each rank's checkpoint state (under 'resiliency/<name>')."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None: ...
    def close(self) -> None: ...
