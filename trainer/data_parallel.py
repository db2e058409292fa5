"""Data parallelism the way Megatron-Core does it: the gradients live in one contiguous buffer per dtype
(each parameter's ``.grad`` a view of it), and after the step's last backward the buffer is averaged over
the ranks with one all-reduce.

Why not ``torch.nn.parallel.DistributedDataParallel``: its constructor imports all of ``torch._dynamo`` (it
asks dynamo's DDP optimization mode), 0.6 s of CPU in every rank of every attempt (issue 18). What this
keeps of it: the parameters broadcast from rank 0 at construction, the average (each rank divides by the
world size, then a summing all-reduce, as DDP's default hook does), and the seam DDP's communication hook
was for the chaos hook: components hear ``before_grad_reduce`` right before each buffer's all-reduce.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist


class GradBuffers:
    """The model's gradients as views of one flat buffer per dtype, reduced in place once per step."""

    def __init__(self, model: torch.nn.Module):
        params = [p for p in model.parameters() if p.requires_grad]
        with torch.no_grad():
            for t in (*params, *model.buffers()):
                dist.broadcast(t, src=0)
        self.buffers: list[torch.Tensor] = []
        for dtype in dict.fromkeys(p.dtype for p in params):
            group = [p for p in params if p.dtype == dtype]
            flat = torch.zeros(sum(p.numel() for p in group), dtype=dtype, device=group[0].device)
            offset = 0
            for p in group:
                p.grad = flat[offset:offset + p.numel()].view_as(p)
                offset += p.numel()
            self.buffers.append(flat)

    def reduce(self, before: Callable[[int], None]) -> None:
        """Average every buffer over the ranks (divide by the world size, then sum); call once the step's
        last micro-batch has run backward. ``before(bucket)`` runs right before each all-reduce. A world of
        one has nothing to average: its buffers are left as they are (a pass over every gradient saved)."""
        world = dist.get_world_size()
        for index, flat in enumerate(self.buffers):
            before(index)
            if world > 1:
                flat.div_(world)
                dist.all_reduce(flat)
