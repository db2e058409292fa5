"""A rank's own state in a checkpoint (its RNG, data position, ...: rank_state/rank-<r>.pt beside DCP's files):
its file, its bytes as taken at the save, and the DCP writer that writes it in an async save's background."""

from __future__ import annotations

import io
import os
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp


def rank_file(folder: Path, rank: int) -> Path:
    return folder / "rank_state" / f"rank-{rank}.pt"


def rank_state_bytes(state: dict[str, Any]) -> bytes:
    """This rank's own state (RNG, data position, ...) as saved, taken now: training goes on after it."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def write_synced(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


class RankStateWriter(dcp.FileSystemWriter):
    """DCP's file system writer that first writes this rank's own state, inside DCP's background save (which
    also makes the folder): an async save then does no file system call in the training thread, and the
    coordinator's gather of every rank's write results still comes after each rank's state is written, so
    rank 0 seals only whole checkpoints."""

    def __init__(self, folder: Path, rank: int, rank_state: bytes):
        super().__init__(str(folder))
        self._rank_file = rank_file(folder, rank)
        self._rank_state = rank_state

    def write_data(self, plan: Any, planner: Any) -> Future:
        write_synced(self._rank_file, self._rank_state)
        return super().write_data(plan, planner)
