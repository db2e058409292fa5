"""NVRx local checkpoints (Bridge's ``checkpoint.non_persistent_ckpt_type: local``): frequent, node-local,
non-persistent saves through NVRx's own ``LocalCheckpointManager``, beside the persistent DCP checkpoints.

The manager (save, find_latest, load; all ranks together) takes a ``TensorAwareStateDict``. NVRx's
``BasicTensorAwareStateDict`` asserts CUDA tensors and restores to cuda, so, as Megatron plugs in its own
``MCoreTensorAwareStateDict``, this trainer plugs in :class:`LocalStateDict`, which works on CPU and GPU. Two
things differ from NVRx 0.4.1's defaults, each for a reason:

- load: NVRx's ``_load`` calls ``torch.load(weights_only=False)``; :class:`_Manager` loads with
  ``weights_only=True``, allowing only :class:`LocalStateDict` beside torch's own safe types;
- start-up: a save killed while it wrote leaves its ``*.dirty.pt`` file, and 0.4.1 opens the next save of
  that iteration with "bx", which then fails (``SameMachineReplicationException``); the trainer removes
  this rank's interrupted files before anything is saved, as it removes unsealed ``.tmp`` folders.

Each node keeps its checkpoints under ``<non_persistent_local_ckpt_dir>/<node identity>`` (NVRx adds
``<session>/<rank>``), so simulated nodes sharing one filesystem have a local disk each. The algorithms are
Megatron's: ``fully_parallel`` splits the tensors every data-parallel replica holds among the ranks (each
writes its share; on load each rank broadcasts its share), ``atomic`` has every rank write all of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from runlog.env import node_id
from runlog.log import EventLog
from runlog.records import CheckpointLoad, LocalCheckpointSave, Resume
from trainer import nvrx_compat
from trainer.components import Component, SavePhase
from trainer.config import CheckpointConfig

nvrx = nvrx_compat.local_checkpointing()

LeafPath = tuple[Any, ...]
"""A leaf's place in a nested state dict: its keys and list indices from the top."""


def leaves(tree: Any, prefix: LeafPath = ()) -> Iterator[tuple[LeafPath, Any]]:
    """Every leaf of nested dicts and lists with its path, in the tree's own order."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from leaves(value, (*prefix, key))
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            yield from leaves(value, (*prefix, i))
    else:
        yield prefix, tree


def rebuild(template: Any, values: dict[LeafPath, Any], prefix: LeafPath = ()) -> Any:
    """`template`'s structure with every leaf taken from `values` by its path."""
    if isinstance(template, dict):
        return {key: rebuild(value, values, (*prefix, key)) for key, value in template.items()}
    if isinstance(template, list):
        return [rebuild(value, values, (*prefix, i)) for i, value in enumerate(template)]
    return values[prefix]


def owners(tensors: Sequence[tuple[LeafPath, torch.Tensor]], world_size: int) -> dict[LeafPath, int]:
    """fully_parallel's split of replicated tensors: each to the rank with the fewest bytes so far (the same
    answer on every rank, which all hold the same shapes)."""
    load = [0] * world_size
    owner = {}
    for path, tensor in tensors:
        rank = min(range(world_size), key=load.__getitem__)
        owner[path] = rank
        load[rank] += tensor.numel() * tensor.element_size()
    return owner


class LocalStateDict(nvrx.TensorAwareStateDict):
    """One rank's local checkpoint: tensors by path, plus plain state (``common``: the rank's own state and
    the sharded state's non-tensor leaves). ``on_write`` is called while torch.save pickles it, that is
    inside the write, with this rank's file open and none of its tensor data written; it is not saved."""

    def __init__(self, tensors: dict[LeafPath, torch.Tensor], common: dict[str, Any], on_write: Callable[[], None] | None = None):
        self.named = tensors
        self.common = common
        self.devices = {path: str(t.device) for path, t in tensors.items()}
        self.hollow = False
        self.on_write = on_write

    def __getstate__(self) -> dict[str, Any]:
        if self.on_write is not None:
            self.on_write()
        return {**self.__dict__, "on_write": None}

    @property
    def tensors(self) -> Iterator[torch.Tensor]:
        assert not self.hollow
        return iter(self.named.values())

    @property
    def is_hollow(self) -> bool:
        return self.hollow

    def pop_tensors(self) -> list[torch.Tensor]:
        result = list(self.tensors)
        self.named = {path: (tuple(t.shape), t.dtype) for path, t in self.named.items()}
        self.hollow = True
        return result

    def insert_tensors(self, tensor_data: Any) -> None:
        assert self.hollow
        self.named = dict(zip(self.named, tensor_data, strict=True))
        self.hollow = False

    def init_tensors(self) -> None:
        assert self.hollow
        self.named = {path: torch.empty(shape, dtype=dtype, device=self.devices[path]) for path, (shape, dtype) in self.named.items()}
        self.hollow = False

    def copy_tensors_to_cpu(self, non_blocking: bool = False) -> None:
        # Copies, not views: the training step goes on updating the originals in place.
        self.named = {p: t.detach().to("cpu", non_blocking=non_blocking, copy=True) for p, t in self.named.items()}

    def restore_tensor_device(self, non_blocking: bool = True) -> None:
        self.named = {p: t.to(self.devices[p], non_blocking=non_blocking) for p, t in self.named.items()}


class _Manager(nvrx.LocalCheckpointManager):
    """NVRx's manager, loading with ``weights_only=True`` (its own ``_load`` unpickles anything)."""

    def _load(self, ckpt_id: Any) -> LocalStateDict:
        path = self._local_ckpt_path_from_id(ckpt_id)
        if not path.is_file():
            raise nvrx.CheckpointingException(f"File {path} does not exist!")
        with torch.serialization.safe_globals([LocalStateDict]):
            return torch.load(path, weights_only=True)

    def remove_interrupted(self) -> None:
        """This rank's files of saves killed while writing (``*.dirty.pt``): 0.4.1 cannot save their iteration again."""
        for stale in self.local_ckpt_dir.glob(self._filename_from_template("*", "*", ".dirty")):
            stale.unlink(missing_ok=True)


class LocalCheckpointer:
    """Saves this rank's local checkpoint every ``non_persistent_save_interval`` steps; finds and loads the
    newest one every rank holds. Every call is collective (NVRx gathers over the default group)."""

    def __init__(self, cfg: CheckpointConfig, events: EventLog, rank: int, world_size: int, components: Sequence[Component]):
        self.cfg, self.events, self.rank, self.world_size, self.components = cfg, events, rank, world_size, components
        self.node_dir = Path(cfg.non_persistent_local_ckpt_dir) / node_id()
        self.manager = _Manager(self.node_dir)

    @property
    def rank_dir(self) -> Path:
        return self.manager.local_ckpt_dir

    def should_save(self, iteration: int) -> bool:
        return bool(self.cfg.non_persistent_save_interval and iteration % self.cfg.non_persistent_save_interval == 0)

    def save(self, iteration: int, state: Any) -> None:
        t0 = time.monotonic()
        self._on_save(SavePhase.BEGIN, iteration)
        tensors, common = self._split(state.sharded_state_dict())
        part = LocalStateDict(tensors, {"rank": state.rank_state_dict(), "plain": common},
                              on_write=lambda: self._on_save(SavePhase.WRITING, iteration))
        self.manager.save(part, iteration, is_async=False)
        self.events.write(LocalCheckpointSave(iteration, str(self.rank_dir), time.monotonic() - t0))
        self._on_save(SavePhase.SEALED, iteration)

    def latest(self) -> int:
        """The newest iteration every rank holds (-1: none), after the components' local-load hook. Called
        once, at the resume, before anything is saved: only then does this rank create its folder (NVRx
        creates it once and lists it without looking again) and remove its interrupted files."""
        for c in self.components:
            c.on_local_load(self.node_dir)
        dist.barrier()  # a component's change to the folder is done on every rank before they look
        self.manager._ensure_dir()
        self.manager.remove_interrupted()
        return self.manager.find_latest()

    def load(self, state: Any, auto: bool) -> int:
        t0 = time.monotonic()
        part, (iteration, _, _) = self.manager.load()
        self.events.write(Resume(iteration, str(self.rank_dir), auto, local=True))
        template = state.sharded_state_dict()
        values = dict(part.common["plain"])
        values.update(self._gather(template, part.named))
        state.load_sharded_state_dict(rebuild(template, values))
        state.load_rank_state_dict(part.common["rank"])
        self.events.write(CheckpointLoad(iteration, str(self.rank_dir), time.monotonic() - t0, local=True))
        return iteration

    def _split(self, sharded: dict[str, Any]) -> tuple[dict[LeafPath, torch.Tensor], dict[LeafPath, Any]]:
        """(the tensors this rank writes, every non-tensor leaf)."""
        tensors = [(p, v) for p, v in leaves(sharded) if isinstance(v, torch.Tensor)]
        common = {p: v for p, v in leaves(sharded) if not isinstance(v, torch.Tensor)}
        if self.cfg.non_persistent_local_ckpt_algo == "atomic":
            return dict(tensors), common
        owner = owners(tensors, self.world_size)
        return {p: t for p, t in tensors if owner[p] == self.rank}, common

    def _gather(self, template: dict[str, Any], mine: dict[LeafPath, torch.Tensor]) -> dict[LeafPath, torch.Tensor]:
        """Every tensor of the state: this rank's own, and (fully_parallel) the others' shares, broadcast by their owners."""
        if self.cfg.non_persistent_local_ckpt_algo == "atomic":
            return mine
        live = [(p, v) for p, v in leaves(template) if isinstance(v, torch.Tensor)]
        owner = owners(live, self.world_size)
        out = {}
        for path, like in live:
            tensor = mine[path] if owner[path] == self.rank else torch.empty_like(like)
            dist.broadcast(tensor, src=owner[path])
            out[path] = tensor
        return out

    def _on_save(self, phase: SavePhase, iteration: int) -> None:
        for c in self.components:
            c.on_local_save(phase, iteration)
