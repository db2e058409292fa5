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

from trainer.config import DistConfig


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


def init_distributed(cfg: DistConfig) -> DistEnv:
    """Initialize the default process group from the launcher's environment (or a world of one)."""
    if "WORLD_SIZE" not in os.environ:
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    want_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    if want_cuda and not torch.cuda.is_available():
        raise RuntimeError("dist.device=cuda but CUDA is not available on this machine")
    if want_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    backend = cfg.distributed_backend if cfg.distributed_backend != "auto" else ("nccl" if want_cuda else "gloo")
    dist.init_process_group(
        backend, timeout=timedelta(minutes=cfg.distributed_timeout_minutes), device_id=device if want_cuda else None
    )
    return DistEnv(dist.get_rank(), dist.get_world_size(), local_rank, backend, device, _launcher())


def all_ranks_agree(flag: bool, device: torch.device) -> bool:
    """True on every rank when `flag` is True on any rank (an OR-reduce; works on gloo and NCCL)."""
    t = torch.tensor([1 if flag else 0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())
