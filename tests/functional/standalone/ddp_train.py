"""A small DDP training script that knows nothing of the chaos harness (it imports only torch).

It stands for "any trainer": launched by torchrun or ft_launcher, it trains a linear regression with
DDP on gloo, prints ``step N loss X`` from rank 0 (with ``--epoch-size K``, ``epoch: E iter: I loss: X``
instead, the iteration counted from 0 in each epoch of K steps, as NVRx's example trainers print it), and
keeps its own checkpoint (rank 0 writes it atomically every ``--save-every`` steps) so that a restarted
worker group resumes where it left off.

    torchrun --nproc-per-node=2 ddp_train.py --steps 40 --ckpt /tmp/ckpt.pt
"""

from __future__ import annotations

import argparse
import os
import socket
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--save-every", type=int, default=5)
    p.add_argument("--ckpt", required=True, help="checkpoint file (shared by every attempt)")
    p.add_argument("--step-delay", type=float, default=0.05, help="seconds of simulated work per step")
    p.add_argument("--epoch-size", type=int, default=None, help="print each step as its epoch and iteration")
    p.add_argument(
        "--port-clash-first-attempt", action="store_true",
        help="the first attempt dies at start-up of a real EADDRINUSE, as a worker whose port another took",
    )
    p.add_argument(
        "--crash-on-resume", action="store_true",
        help="a resume loads its checkpoint, then fails (a planted bug, like a checkpoint no restart can load)",
    )
    return p.parse_args()


def clash_on_a_port() -> None:
    """Bind a port that this process already listens on: the kernel's EADDRINUSE, raised uncaught."""
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    socket.socket().bind(held.getsockname())


def save(path: str, model: torch.nn.Module, opt: torch.optim.Optimizer, step: int) -> None:
    tmp = f"{path}.tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
    os.replace(tmp, path)


def progress(step: int, epoch_size: int | None, loss: float) -> str:
    if epoch_size is None:
        return f"step {step} loss {loss:.6f}"
    epoch, iteration = divmod(step - 1, epoch_size)
    return f"epoch: {epoch} iter: {iteration} loss: {loss:.6f}"


def main() -> None:
    args = parse_args()
    if args.port_clash_first_attempt and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
        clash_on_a_port()
    dist.init_process_group("gloo")
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
        if args.crash_on_resume:
            raise RuntimeError(f"cannot resume from the step-{start} checkpoint (--crash-on-resume)")
        if rank == 0:
            print(f"resumed from step {start}", flush=True)
    ddp = DDP(model)
    target = torch.arange(8, dtype=torch.float32)
    for step in range(start + 1, args.steps + 1):
        gen = torch.Generator().manual_seed(step * world + rank)
        x = torch.randn(16, 8, generator=gen)
        loss = ((ddp(x).squeeze(-1) - x @ target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(args.step_delay)
        if rank == 0:
            print(progress(step, args.epoch_size, loss.item()), flush=True)
            if step % args.save_every == 0:
                save(args.ckpt, model, opt, step)
        dist.barrier()  # every rank sees the checkpoint of `step` before any computes the next
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
