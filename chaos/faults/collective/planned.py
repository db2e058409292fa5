"""The rank stops inside a collective: a real receive no peer answers, in C++."""

from __future__ import annotations

from dataclasses import dataclass

from chaos.faults.in_rank import Rank, RankFault


@dataclass(frozen=True)
class CollectiveHang(RankFault):
    """The rank stops in the gradient all-reduce of its step, its peers waiting inside it."""

    type = "collective_hang"

    def in_allreduce(self, rank: Rank, step: int, bucket: int) -> None:
        import torch
        import torch.distributed as dist

        if step != self.at_step:
            return
        rank.announce(self, step, f"inside the gradient all-reduce (bucket {bucket})")
        # The rank blocks in a real receive on the training group that no peer answers, as a rank stuck
        # inside a collective: in C++, where neither its peers (waiting in the all-reduce it never joins)
        # nor an asynchronous raise can reach it, and its sockets stay open. Only the group's abort ends it
        # (NCCL: NVRx's in-process restart aborts the communicators), or the kill of the process (gloo has
        # no abort).
        peer = (rank.rank + 1) % rank.ctx.world_size
        aborted = f"collective aborted: rank {rank.rank} hung in the all-reduce of step {step}"
        try:
            dist.recv(torch.empty(1, device=rank.ctx.device), src=peer, tag=HANG_TAG)
        except Exception as e:
            raise RuntimeError(aborted) from e
        raise RuntimeError(aborted)


HANG_TAG = 0x4841
"""The tag of the hung rank's receive, which nothing in the trainer sends."""
