"""The kinds the injector fires inside the ranks, by their planned classes (what it reads from a plan).

Standard library only; the outside kinds are in outside_kinds.py, which the ranks do not import.
"""

from __future__ import annotations

from chaos.faults.checkpoint.planned import CheckpointCorrupt, FaultDuringCheckpoint, LocalCheckpointLost
from chaos.faults.collective.planned import CollectiveHang
from chaos.faults.disk.planned import StorageStall
from chaos.faults.gpu.planned import GpuOom
from chaos.faults.in_rank import RankFault
from chaos.faults.loss.planned import NanLoss, SpikyLoss
from chaos.faults.memory.planned import HostOom
from chaos.faults.native.planned import Abort, GilDeadlock, Segfault
from chaos.faults.process.planned import ExceptionFault, RankHung, RankKilled
from chaos.faults.slow.planned import SlowRank
from chaos.faults.soak.planned import SoakFault

RANK_FAULTS: tuple[type[RankFault], ...] = (
    RankKilled, RankHung, ExceptionFault, CollectiveHang, FaultDuringCheckpoint, CheckpointCorrupt, SlowRank,
    NanLoss, SpikyLoss, LocalCheckpointLost, StorageStall, HostOom,
    Segfault, Abort, GilDeadlock, GpuOom, SoakFault,
)
"""Every kind the injector fires (the plan's other kinds are the supervisor's)."""
