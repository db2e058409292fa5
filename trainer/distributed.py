"""Process-group setup: gloo on CPU, NCCL on GPU, chosen from the device; one code path for every launch.

A plain `python -m trainer` (no torchrun/ft_launcher environment) becomes a world of one on a free
loopback port, so single-process runs take the same path as launched ones.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from runlog.env import STORE_PORT_VAR, launch_round
from trainer.config import DistConfig, wants_cuda
from trainer.config_base import ConfigError


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device
    launcher: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launcher() -> str:
    if "FT_RANK_MONITOR_IPC_SOCKET" in os.environ or "FT_LAUNCHER_IPC_SOCKET" in os.environ:
        return "ft_launcher"
    return "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "single"


START_TIMEOUT = timedelta(minutes=1)
"""The least time ranks get to join the group: a collective timeout of seconds (a test's) is set once all have
joined, since on a loaded machine a peer's start (``import torch``) alone can take that long."""


def init_distributed(cfg: DistConfig, store: dist.Store | None = None) -> DistEnv:
    """Initialize the default process group from the launcher's environment (or a world of one).

    ``store``: rendezvous through this store instead of MASTER_ADDR:MASTER_PORT (in-process restart gives
    each of its iterations a fresh prefix of one store, as Megatron Bridge does).
    """
    if "WORLD_SIZE" not in os.environ:
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    want_cuda = wants_cuda(cfg)
    if want_cuda and not torch.cuda.is_available():
        raise ConfigError("dist.device=cuda: CUDA is not available on this machine")
    if cfg.distributed_backend == "nccl" and not want_cuda:
        raise ConfigError("dist.distributed_backend=nccl: no CUDA GPU on this machine; use gloo")
    if want_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    backend = cfg.distributed_backend if cfg.distributed_backend != "auto" else ("nccl" if want_cuda else "gloo")
    timeout = timedelta(minutes=cfg.distributed_timeout_minutes)
    joining = max(timeout, START_TIMEOUT)
    if store is None and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        store = _attempt_store(joining)
    elif store is None and STORE_PORT_VAR in os.environ:
        os.environ["MASTER_PORT"] = os.environ[STORE_PORT_VAR]
    on_store = {} if store is None else {"store": store, "rank": int(os.environ["RANK"]), "world_size": int(os.environ["WORLD_SIZE"])}
    dist.init_process_group(backend, timeout=joining, device_id=device if want_cuda else None, **on_store)
    if timeout < joining:
        dist.distributed_c10d._set_pg_timeout(timeout)
    return DistEnv(dist.get_rank(), dist.get_world_size(), local_rank, backend, device, _launcher())


def _attempt_store(timeout: timedelta) -> dist.Store:
    """The launcher's store under a prefix of this restart round.

    torchrun's c10d agent keeps one store across restart rounds; without a per-round prefix the new
    workers can read the dead round's gloo addresses and fail connectFullMesh (seen under torchrun
    --max-restarts; ft_launcher's own rendezvous does not show it).
    """
    agent_store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), int(os.environ["WORLD_SIZE"]),
        is_master=False, timeout=timeout,
    )
    return dist.PrefixStore(f"/trainer/round_{launch_round()}", agent_store)


def all_ranks_agree(flag: bool, device: torch.device) -> bool:
    """True on every rank when `flag` is True on any rank (an OR-reduce; works on gloo and NCCL)."""
    t = torch.tensor([1 if flag else 0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())
