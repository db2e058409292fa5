"""The storage family as a scenario writes it: disk_full, storage_stall."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from chaos.faults.disk import planned as fired
from chaos.faults.plan import PlannedFault
from chaos.faults.spec import FaultSpec, require_at_step

if TYPE_CHECKING:
    from trainer.config import TrainerConfig

MIB = 1 << 20


class DiskFull(FaultSpec):
    """The checkpoint disk (a tmpfs of `disk_bytes` for the run) fills up just before the save of `at_step`,
    which fails with the kernel's ENOSPC part-way; the disk stays full for `duration_s` seconds."""

    type: Literal["disk_full"]
    planned = fired.DiskFull
    disk_bytes: int = Field(default=4 * MIB, ge=64 << 10)
    """The size of the run's checkpoint disk: it must hold the checkpoints the run keeps, and one more in flight."""
    duration_s: float = Field(default=2.0, gt=0)
    """How long the disk stays full (the filler is removed then): past the failed save, before the restart's."""
    path: str = "checkpoints"
    """The bounded folder, under the run folder: the trainer's checkpoints, or a `command`'s own folder
    (`{run_dir}/<path>` in its arguments)."""

    @model_validator(mode="after")
    def _one_trigger(self) -> DiskFull:
        require_at_step(self)
        if self.rank is not None:
            raise ValueError("disk_full fills the run's disk, which every rank shares: leave out rank")
        _check_path(self.path)
        return self

    def _own(self) -> dict[str, Any]:
        return {**super()._own(), "ranks": None, "target": "launcher"}


class StorageStall(FaultSpec):
    """The checkpoint storage (served through a FUSE file system of the run) stops answering for `stall_s`
    seconds from the start of the save of `at_step` (a `command`: once its step is seen): every system call on
    it blocks until then."""

    type: Literal["storage_stall"]
    planned = fired.StorageStall
    rank: int | None = Field(default=None, ge=0)
    """Our trainer's rank that stops the storage inside its save (None: rank 0); a `command`'s is stopped from
    outside: leave it out."""
    stall_s: float = Field(gt=0)
    store_bytes: int = Field(default=64 * MIB, ge=MIB)
    """The tmpfs the server keeps the checkpoints on."""
    path: str = "checkpoints"
    """The served folder, under the run folder: the trainer's checkpoints, or a `command`'s own checkpoint
    folder (`{run_dir}/<path>` in its arguments)."""

    @model_validator(mode="after")
    def _one_trigger(self) -> StorageStall:
        require_at_step(self)
        _check_path(self.path)
        return self

    def plan(self, fault_id: str, rng: random.Random, world_size: int, command: bool = False) -> PlannedFault:
        """Inside our trainer's save, by its rank; for a `command`, from outside once its step is seen."""
        if not command:
            rank = 0 if self.rank is None else self.rank
            return fired.StorageStall(fault_id, rank, self.attempt, self.at_step, None, self.stall_s, self.store_bytes)
        return fired.StorageStallOutside(
            fault_id, None, self.attempt, self.at_step, None, None, "launcher",
            stall_s=self.stall_s, store_bytes=self.store_bytes, path=self.path,
        )


def _check_path(path: str) -> None:
    if not path or path.startswith("/") or ".." in path.split("/"):
        raise ValueError(f"path: a folder under the run folder, got {path!r}")


def checkpoint_floor(cfg: TrainerConfig) -> int:
    """The fewest bytes one checkpoint of this model takes: its fp32 weights, and AdamW's two moments of each
    (the DCP files; their metadata, the ranks' own state and the manifest come on top)."""
    m = cfg.model
    h, f, layers = m.hidden_size, m.ffn_hidden_size or 4 * m.hidden_size, m.num_layers
    block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h)
    params = m.vocab_size * h + m.seq_length * h + layers * block + 2 * h
    return params * 4 * (3 if cfg.optimizer.optimizer == "adam" else 1)


def scenario_problems(
    fault: DiskFull | StorageStall, cfg: TrainerConfig, command: bool, deadline_s: float, kinds: set[str],
) -> Iterator[str]:
    """The rules of a storage fault that need the whole scenario (its fields named under the fault; `kinds`:
    the types of all its faults)."""
    if isinstance(fault, StorageStall):
        if "disk_full" in kinds:
            yield "type: storage_stall and disk_full both make the checkpoint folder (a FUSE server, a bounded tmpfs)"
        if command and fault.rank is not None:
            yield "rank: a command's storage is stopped from outside, for every rank: leave out rank"
        if not command and fault.path != "checkpoints":
            yield f"path: our trainer keeps its checkpoints in checkpoints (got {fault.path!r}; path is a command's)"
        if fault.stall_s >= deadline_s:
            yield f"stall_s: {fault.stall_s:g} is not shorter than deadline_s ({deadline_s:g})"
    elif not command and fault.disk_bytes < (floor := checkpoint_floor(cfg)):
        yield f"disk_bytes: {fault.disk_bytes} cannot hold one checkpoint of this model (at least {floor} bytes)"
