"""A DDP trainer with DataLoader worker processes that heartbeats to NVRx's rank monitor, as NVRx's example
trainer ``examples/fault_tolerance/train_ddp_heartbeats_api.py`` does (it imports only torch and NVRx).

Launched by ft_launcher, each rank serves its batches from a torch DataLoader with ``--num-workers``
workers (forked: they inherit every descriptor the rank has open, rank 0's listening store socket
included), sends a heartbeat every step, prints ``step N loss X`` from rank 0 and keeps its own checkpoint
(rank 0 writes it atomically every ``--save-every`` steps) so that a restarted worker group resumes. With
``--slow-batch N`` the first attempt's batch of step N takes a worker ``--slow-batch-s`` seconds to load (a
slow shard): a worker busy with it when its rank dies outlives the rank by that long. With ``--helper-mib N``
rank 0 of the first attempt first forks a helper that holds N MiB of memory and ignores SIGTERM (a cache
process): only SIGKILL ends it, and releasing its memory takes the kernel a moment. With ``--helper-session``
the helper starts a session of its own (as a daemon does), leaving its rank's process group.

    ft_launcher --nproc-per-node=2 --ft-cfg-path=cfg.yaml loader_train.py --steps 20 --ckpt /tmp/ckpt.pt
"""

from __future__ import annotations

import argparse
import os
import signal
import time

import torch
import torch.distributed as dist
from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient
from torch.nn.parallel import DistributedDataParallel as DDP


class Batches(torch.utils.data.Dataset):
    """Step `i`'s batch of this rank, the same on every attempt."""

    def __init__(self, rank: int, world: int, steps: int, slow: dict[int, float]):
        self.rank, self.world, self.steps, self.slow = rank, world, steps, slow

    def __len__(self) -> int:
        return self.steps + 1

    def __getitem__(self, step: int) -> torch.Tensor:
        time.sleep(self.slow.get(step, 0.0))  # a batch whose shard is slow to read
        return torch.randn(16, 8, generator=torch.Generator().manual_seed(step * self.world + self.rank))


def hold(mib: int) -> None:
    """The helper: touch `mib` MiB, then wait deaf to SIGTERM until killed."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    cache = bytearray(mib << 20)
    cache[:: 1 << 12] = b"\1" * len(range(0, len(cache), 1 << 12))
    while True:
        time.sleep(60)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--save-every", type=int, default=5)
    p.add_argument("--ckpt", required=True, help="checkpoint file (shared by every attempt)")
    p.add_argument("--step-delay", type=float, default=0.05, help="seconds of simulated work per step")
    p.add_argument("--num-workers", type=int, default=2, help="DataLoader worker processes per rank")
    p.add_argument("--slow-batch", type=int, default=None, help="the first attempt's batch of this step is slow to load")
    p.add_argument("--slow-batch-s", type=float, default=8.0, help="seconds the slow batch takes a worker")
    p.add_argument("--helper-mib", type=int, default=0, help="rank 0 first forks a helper holding this much memory, deaf to SIGTERM")
    p.add_argument("--helper-session", action="store_true", help="the helper leaves its rank's process group (setsid)")
    args = p.parse_args()
    first = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    slow = {args.slow_batch: args.slow_batch_s} if args.slow_batch is not None and first else {}
    if args.helper_mib and first and os.environ.get("RANK") == "0" and os.fork() == 0:
        if args.helper_session:
            os.setsid()
        hold(args.helper_mib)
    dist.init_process_group("gloo")
    client = RankMonitorClient()
    client.init_workload_monitoring()
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 0
    if os.path.exists(args.ckpt):
        state = torch.load(args.ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
        if rank == 0:
            print(f"resumed from step {start}", flush=True)
    ddp = DDP(model)
    loader = torch.utils.data.DataLoader(
        Batches(rank, world, args.steps, slow), batch_size=None, sampler=range(start + 1, args.steps + 1),
        num_workers=args.num_workers, multiprocessing_context="fork",
    )
    target = torch.arange(8, dtype=torch.float32)
    for step, x in enumerate(loader, start + 1):
        loss = ((ddp(x).squeeze(-1) - x @ target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(args.step_delay)
        client.send_heartbeat()
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)
            if step % args.save_every == 0:
                tmp = f"{args.ckpt}.tmp"
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
                os.replace(tmp, args.ckpt)
        dist.barrier()  # every rank sees the checkpoint of `step` before any computes the next
    client.shutdown_workload_monitoring()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
