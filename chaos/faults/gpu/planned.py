"""gpu_oom as the injector fires it: an allocation the CUDA caching allocator cannot satisfy."""

from __future__ import annotations

from dataclasses import dataclass

from chaos.faults.in_rank import Rank, RankFault

OVER_BYTES = 1 << 30
"""How far past the device's whole memory the allocation asks: no freeing of cached blocks can make room."""


@dataclass(frozen=True)
class GpuOom(RankFault):
    """The rank's step fails with torch.cuda.OutOfMemoryError: it allocates more than its device has."""

    type = "gpu_oom"

    def before_step(self, rank: Rank, iteration: int) -> None:
        import torch

        if iteration != self.at_step:
            return
        device = rank.ctx.device
        if device.type != "cuda":
            rank.miss(self, f"the rank computes on {device}, not a CUDA device")
            return
        free, total = torch.cuda.mem_get_info(device)
        size = total + OVER_BYTES
        rank.announce(self, iteration, f"allocating {size / 2**30:.1f} GiB on {device} ({free / 2**30:.1f} GiB free)")
        torch.empty(size, dtype=torch.uint8, device=device)
