"""Atomic, verified, resumable checkpoints with torch.distributed.checkpoint (DCP).

Layout under `checkpoint.save`::

    iter_0000005/            a finished checkpoint: DCP files, rank_state/rank-<r>.pt, manifest.json
    iter_0000010.tmp/        a save in flight (never loaded; removed at the next start)
    latest_checkpointed_iteration.txt

A save writes into `iter_N.tmp`, then rank 0 writes manifest.json (size and sha256 of every file),
renames the folder into place, and only then rewrites the tracker (temp file + os.replace). A save killed
half-way therefore leaves an `.tmp` folder that nothing loads. A save the storage refuses (an OSError:
ENOSPC, EIO; also from DCP's writer threads or an async save's future) fails on every rank together, its
`.tmp` removed; the trainer exits (`SaveFailed`) or goes on without it (`checkpoint.on_save_failure`).
On load, each candidate (newest first) is
checked against its manifest; a corrupt or truncated one emits `checkpoint_corrupt` and the next older
one is tried. Rank 0 picks and broadcasts, so every rank loads the same checkpoint.

The components hear the phases (trainer/components.py): a load's ``choose`` (the candidates, before the
choice) and ``read`` (inside the load), a save's ``begin``, ``issued`` and ``sealed``.

With NVRx local checkpoints on (trainer/local_checkpoint.py), resume takes the newest local checkpoint that
every rank holds when it is at least as new as the newest good persistent one, as Megatron Bridge's
``_load_base_checkpoint`` decides; else the persistent one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import shutil
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from runlog.log import EventLog
from runlog.records import (
    CheckpointCorrupt,
    CheckpointLoad,
    CheckpointSaveBegin,
    CheckpointSaveEnd,
    CheckpointSaveFailed,
    Resume,
)
from trainer.components import Component, LoadPhase, SavePhase
from trainer.config import CheckpointConfig
from trainer.rank_state import RankStateWriter, rank_file, rank_state_bytes, write_synced
from trainer.storage_errors import storage_error

if TYPE_CHECKING:
    from trainer.local_checkpoint import LocalCheckpointer

log = logging.getLogger(__name__)

TRACKER = "latest_checkpointed_iteration.txt"
MANIFEST = "manifest.json"


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used (wrong world size, another model, nothing loadable where `load` points)."""


class SaveFailed(RuntimeError):
    """The storage refused a checkpoint save and checkpoint.on_save_failure is exit: the rank exits with it."""


class Checkpointable(Protocol):
    """What the trainer hands to the checkpointer: DCP-shardable state and per-rank plain state."""

    def sharded_state_dict(self) -> dict[str, Any]: ...
    def load_sharded_state_dict(self, state: dict[str, Any]) -> None: ...
    def rank_state_dict(self) -> dict[str, Any]: ...
    def load_rank_state_dict(self, state: dict[str, Any]) -> None: ...


def iteration_dir(root: Path, iteration: int) -> Path:
    return root / f"iter_{iteration:07d}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file, fsync, os.replace: readers see the old or the new content, never half."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(folder: Path, iteration: int, world_size: int) -> None:
    files = {
        str(p.relative_to(folder)): {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    manifest = {"iteration": iteration, "world_size": world_size, "files": files}
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=1))


def verify(folder: Path, check_hashes: bool = True) -> str | None:
    """None when `folder` is a complete checkpoint matching its manifest, else the reason it is not."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return "missing or unreadable manifest.json"
    for name, meta in files.items():
        path = folder / name
        if not path.is_file():
            return f"missing file {name}"
        if path.stat().st_size != meta["size"]:
            return f"{name}: size {path.stat().st_size} != {meta['size']} (truncated?)"
        if check_hashes and _sha256(path) != meta["sha256"]:
            return f"{name}: sha256 mismatch (corrupted)"
    return None


def list_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """Finished checkpoint folders under `root`, newest first (in-flight .tmp folders excluded)."""
    found = []
    for p in root.glob("iter_*"):
        suffix = p.name.removeprefix("iter_")
        if p.is_dir() and suffix.isdigit():
            found.append((int(suffix), p))
    return sorted(found, reverse=True)


@dataclass(frozen=True)
class Candidate:
    """A finished checkpoint folder (a CheckpointCandidate for the components' load hooks)."""

    iteration: int
    folder: Path

    def data_files(self) -> list[Path]:
        return [p for p in self.folder.rglob("*") if p.is_file() and p.name != MANIFEST]


def _refuse_another_model(folder: Path, model: dict[str, Any]) -> None:
    """A checkpoint of another model (other sizes or layers) is named before DCP's load, which would fail
    inside its collective planning with a traceback."""
    try:
        saved = dcp.FileSystemReader(str(folder)).read_metadata().state_dict_metadata
    except (OSError, ValueError, EOFError, pickle.UnpicklingError) as e:
        raise CheckpointError(f"{folder}: unreadable checkpoint metadata ({e})") from None
    for name, tensor in model.items():
        size = getattr(saved.get(f"model.{name}"), "size", None)
        if size is None or tuple(size) != tuple(tensor.shape):
            there = "missing" if size is None else f"of shape {list(size)}"
            raise CheckpointError(
                f"{folder}: model.{name} is {there} there, {list(tensor.shape)} in this model (a checkpoint of another model?)"
            )


@dataclass
class _PendingSave:
    iteration: int
    tmp: Path
    future: Future
    started: float


class Checkpointer:
    """Saves every `save_interval` steps (sync or async) and resumes from the newest good checkpoint."""

    def __init__(
        self, cfg: CheckpointConfig, events: EventLog, rank: int, world_size: int, components: Sequence[Component] = (),
    ):
        self.cfg = cfg
        self.components = components
        self.events = events
        self.rank = rank
        self.world_size = world_size
        self.root = Path(cfg.save) if cfg.save else None
        self._pending: _PendingSave | None = None
        self._ckpt_group = None
        if self.root is not None and rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            for stale in self.root.glob("iter_*.tmp"):
                shutil.rmtree(stale, ignore_errors=True)
        if self.root is not None:
            dist.barrier()
        self.local: LocalCheckpointer | None = None
        if cfg.local:  # NVRx is imported only when local checkpoints are on
            from trainer.local_checkpoint import LocalCheckpointer

            self.local = LocalCheckpointer(cfg, events, rank, world_size, components)

    # ----------------------------------------------------------------------------------------- load
    def load(self, state: Checkpointable) -> int:
        """Restore the newest good checkpoint; returns its iteration (0: nothing to resume from)."""
        source = self.cfg.load or self.cfg.save
        self._on_load(LoadPhase.CHOOSE, [Candidate(i, f) for i, f in list_checkpoints(Path(source))] if source else [])
        if source is None:
            return 0
        local_latest = self.local.latest() if self.local is not None else -1
        dist.barrier()  # whatever a component did to the candidates is done on every rank before rank 0 picks
        choice = [self._choose(Path(source)) if self.rank == 0 else None]
        dist.broadcast_object_list(choice, src=0)
        auto = self.cfg.load is None
        if local_latest >= 0 and local_latest >= (choice[0] or (-1,))[0]:
            return self.local.load(state, auto)
        if choice[0] is None:
            if self.cfg.load is not None:
                raise CheckpointError(f"checkpoint.load={self.cfg.load}: no loadable checkpoint there")
            return 0
        iteration, folder = choice[0]
        folder = Path(folder)
        self.events.write(Resume(iteration, str(folder), auto))
        if auto and self.rank == 0:
            log.warning(
                "AUTO-RESUME: checkpoint.load is unset; resuming from the newest good checkpoint in "
                "checkpoint.save: %s (iteration %d)", folder, iteration,
            )
        t0 = time.monotonic()
        own = rank_file(folder, self.rank)
        if not own.is_file():
            raise CheckpointError(f"{folder}: no state for rank {self.rank} (saved with another world size?)")
        sharded = state.sharded_state_dict()
        _refuse_another_model(folder, sharded["model"])
        dcp.load(sharded, checkpoint_id=str(folder))
        self._on_load(LoadPhase.READ, [Candidate(iteration, folder)])
        state.load_sharded_state_dict(sharded)
        state.load_rank_state_dict(torch.load(own, weights_only=True))
        self.events.write(CheckpointLoad(iteration, str(folder), time.monotonic() - t0))
        return iteration

    def _choose(self, root: Path) -> tuple[int, str] | None:
        for iteration, folder in list_checkpoints(root):
            reason = verify(folder, self.cfg.verify_on_load)
            if reason is None:
                return iteration, str(folder)
            self.events.write(CheckpointCorrupt(str(folder), reason))
            log.warning("checkpoint %s is unusable (%s); trying the previous one", folder, reason)
        return None

    # ----------------------------------------------------------------------------------------- save
    def should_save(self, iteration: int) -> bool:
        return bool(self.root and self.cfg.save_interval and iteration % self.cfg.save_interval == 0)

    def should_save_local(self, iteration: int) -> bool:
        """A local checkpoint is due (a step that saves a persistent one saves no local one, as in Bridge)."""
        return self.local is not None and self.local.should_save(iteration)

    def save(self, iteration: int, state: Checkpointable) -> None:
        """Write a checkpoint of `iteration`; async saves are finalized later by `poll` or `close`."""
        assert self.root is not None
        self.wait()
        final = iteration_dir(self.root, iteration)
        tmp = final.with_name(final.name + ".tmp")
        self.events.write(CheckpointSaveBegin(iteration, str(final), self.cfg.async_save))
        t0 = time.monotonic()
        own = rank_state_bytes(state.rank_state_dict())
        if self.cfg.async_save:  # no file system call in the step: stalled storage holds up the writer, not training
            self._on_save(SavePhase.BEGIN, iteration)
            writer = RankStateWriter(tmp, self.rank, own)
            group = self._checkpoint_group()
            future = dcp.async_save(state.sharded_state_dict(), storage_writer=writer, process_group=group)
            self._pending = _PendingSave(iteration, tmp, future, t0)
            self._on_save(SavePhase.ISSUED, iteration)
            return
        if self._failed(iteration, tmp, self._try(self._make_tmp, tmp, tmp) if self.rank == 0 else None):
            return
        self._on_save(SavePhase.BEGIN, iteration)
        if self._failed(iteration, tmp, self._try(write_synced, tmp, rank_file(tmp, self.rank), own)):
            return
        written = self._try(dcp.save, tmp, state.sharded_state_dict(), checkpoint_id=str(tmp))
        self._on_save(SavePhase.ISSUED, iteration)
        if self._failed(iteration, tmp, written):
            return
        if self._failed(iteration, tmp, self._try(self._seal, tmp, iteration, tmp)):
            return  # every rank's save_end then means: sealed and named in the tracker
        self._log_end(iteration, t0, is_async=False)

    def _make_tmp(self, tmp: Path) -> None:
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "rank_state").mkdir(parents=True)

    @staticmethod
    def _try(write: Callable[..., object], where: Path, *args: Any, **kwargs: Any) -> str | None:
        """None when `write` (to `where`) succeeded, else the text of the storage's error; any other
        failure is raised."""
        try:
            write(*args, **kwargs)
        except (Exception, CheckpointException) as e:  # DCP's CheckpointException is a BaseException
            found = storage_error(e, where)
            if found is None:
                raise
            return f"[Errno {found.errno}] {found.strerror}" if found.strerror else str(found)
        return None

    def _failed(self, iteration: int, tmp: Path, error: str | None, is_async: bool = False) -> bool:
        """Whether a save phase failed on any rank (a sync phase's outcome is agreed by all, in place of a
        barrier, so that they fail it together); a failed save's folder is removed, and the trainer exits
        or goes on as checkpoint.on_save_failure says."""
        if not is_async:
            errors: list[str | None] = [None] * self.world_size
            dist.all_gather_object(errors, error)
            error = next((f"rank {r}: {e}" for r, e in enumerate(errors) if e), None)
        if error is None:
            return False
        action = self.cfg.on_save_failure
        self.events.write(CheckpointSaveFailed(iteration, str(iteration_dir(self.root, iteration)), error, action, is_async))
        if self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        if action == "exit":
            raise SaveFailed(f"the checkpoint save of step {iteration} failed: {error}")
        log.warning("the checkpoint save of step %d failed (%s); training goes on without it", iteration, error)
        return True

    def _checkpoint_group(self) -> dist.ProcessGroup:
        # DCP's background collectives must not interleave with the gradient all-reduces on the training group:
        # on gloo that deadlocks (measured), so async saves get a group of their own.
        if self._ckpt_group is None:
            self._ckpt_group = dist.new_group(backend="gloo")
        return self._ckpt_group

    def _seal(self, iteration: int, tmp: Path) -> None:
        """Rank 0 seals the checkpoint: manifest, rename into place, then the tracker."""
        if self.rank != 0:
            return
        final = iteration_dir(self.root, iteration)
        write_manifest(tmp, iteration, self.world_size)
        shutil.rmtree(final, ignore_errors=True)
        os.rename(tmp, final)
        _fsync_dir(self.root)
        atomic_write_text(self.root / TRACKER, f"{iteration}\n")
        self._prune(iteration)

    def _log_end(self, iteration: int, started: float, is_async: bool) -> None:
        path = str(iteration_dir(self.root, iteration))
        self.events.write(CheckpointSaveEnd(iteration, path, time.monotonic() - started, is_async))
        self._on_save(SavePhase.SEALED, iteration)

    def _on_save(self, phase: SavePhase, iteration: int) -> None:
        for c in self.components:
            c.on_save(phase, iteration)

    def _on_load(self, phase: LoadPhase, checkpoints: list[Candidate]) -> None:
        for c in self.components:
            c.on_load(phase, checkpoints)

    def _prune(self, sealed: int) -> None:
        """Keep the newest most_recent_k checkpoints up to the one just `sealed`. A newer folder is one a load
        rejected as corrupt (the run resumed from an older one): it is no checkpoint retention keeps, and
        counted as one it would prune the checkpoint just sealed in its place."""
        if self.cfg.most_recent_k > 0:
            kept = [folder for iteration, folder in list_checkpoints(self.root) if iteration <= sealed]
            for folder in kept[self.cfg.most_recent_k :]:
                shutil.rmtree(folder, ignore_errors=True)

    def poll(self) -> None:
        """Finalize an async save whose writes have finished (called once per step)."""
        if self._pending is not None and self._pending.future.done():
            self.wait()

    def wait(self) -> None:
        """Block until an in-flight async save is written and sealed (or has failed)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        # Rank 0's future completes only after every rank's data is written (DCP gathers write results
        # at the coordinator before it writes the metadata), so rank 0 may seal without a barrier.
        # (Other ranks' save_end therefore means "my part is written"; rank 0's means "sealed".) A failed
        # write fails every rank's future: DCP hands the coordinator's outcome to all.
        error = self._try(pending.future.result, pending.tmp)
        error = error or self._try(self._seal, pending.tmp, pending.iteration, pending.tmp)
        if not self._failed(pending.iteration, pending.tmp, error, is_async=True):
            self._log_end(pending.iteration, pending.started, is_async=True)

    def close(self) -> None:
        self.wait()
