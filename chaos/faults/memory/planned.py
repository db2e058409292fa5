"""host_oom as planned and fired: the rank joins the run's memory cgroup and grows until the kernel kills it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from chaos.faults.in_rank import Rank, RankFault
from runlog.env import MEMORY_CGROUP_VAR

CHUNK = 1 << 20


@dataclass(frozen=True)
class HostOom(RankFault):
    """Before its step the rank moves into the run's memory cgroup (limit ``limit_bytes``) and allocates
    until the kernel's OOM killer ends it."""

    type = "host_oom"
    limit_bytes: int

    def before_step(self, rank: Rank, iteration: int) -> None:
        if iteration != self.at_step:
            return
        cgroup = os.environ.get(MEMORY_CGROUP_VAR)
        if not cgroup:
            rank.miss(self, "the run has no memory cgroup for it")
            return
        rank.announce(self, iteration, f"pid {os.getpid()} joins {cgroup} (limit {self.limit_bytes} bytes) and grows")
        (Path(cgroup) / "cgroup.procs").write_text(str(os.getpid()))
        grown = [bytearray(b"\x01") * CHUNK for _ in range(4 * self.limit_bytes // CHUNK)]
        raise RuntimeError(f"host_oom: {len(grown)} MiB past the cgroup's limit and not killed (is {cgroup} enforcing?)")
