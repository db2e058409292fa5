"""trainer.data_parallel on two forked gloo ranks: the weights start as rank 0's, the gradients stay views
of one buffer, and the reduction is DDP's average (each rank's gradient divided by the world, then summed)."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from trainer.data_parallel import GradBuffers
from trainer.distributed import _free_port

WORLD = 2


def _rank(rank: int, port: int, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.manual_seed(rank)  # different weights on each rank: the broadcast must make them rank 0's
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    grads = GradBuffers(model)
    weights = [torch.zeros(sum(p.numel() for p in model.parameters())) for _ in range(WORLD)]
    dist.all_gather(weights, torch.cat([p.detach().flatten() for p in model.parameters()]))
    views = [p.grad.data_ptr() for p in model.parameters()]

    for _ in range(2):  # two micro-batches accumulate into the views
        model(torch.full((2, 4), float(rank + 1))).sum().backward()
    local = torch.cat([p.grad.flatten() for p in model.parameters()])
    every = [torch.zeros_like(local) for _ in range(WORLD)]
    dist.all_gather(every, local)
    seen: list[int] = []
    grads.reduce(seen.append)
    out[rank] = {
        "same_weights": torch.equal(weights[0], weights[1]),
        "views_kept": views == [p.grad.data_ptr() for p in model.parameters()],
        "one_buffer": len(grads.buffers) == 1 and views[0] == grads.buffers[0].data_ptr(),
        "averaged": torch.equal(torch.cat([p.grad.flatten() for p in model.parameters()]),
                                sum(g / WORLD for g in every)),
        "buckets": seen,
    }
    dist.destroy_process_group()


def test_two_ranks_start_equal_and_average_their_gradients_in_place() -> None:
    with mp.Manager() as manager:
        out = manager.dict()
        mp.start_processes(_rank, args=(_free_port(), out), nprocs=WORLD, start_method="fork")
        results = dict(out)
    for rank in range(WORLD):
        assert results[rank] == {
            "same_weights": True, "views_kept": True, "one_buffer": True, "averaged": True, "buckets": [0],
        }, rank
