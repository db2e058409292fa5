"""Every fault kind a scenario may name (``faults:``), by its schema class: the union the scenario validates."""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from chaos.faults.checkpoint.schema import CheckpointCorrupt, FaultDuringCheckpoint, LocalCheckpointLost
from chaos.faults.collective.schema import CollectiveHang
from chaos.faults.disk.schema import DiskFull, StorageStall
from chaos.faults.gpu.schema import GpuOom
from chaos.faults.loss.schema import NanLoss, SpikyLoss
from chaos.faults.memory.schema import HostOom
from chaos.faults.native.schema import Abort, GilDeadlock, Segfault
from chaos.faults.network.schema import NetworkDegraded, NetworkPartition
from chaos.faults.nic.schema import NicLinkDown
from chaos.faults.node_health.schema import NodeUnhealthy
from chaos.faults.nodes.schema import NodeHung, NodeKilled, NodeRejoin
from chaos.faults.process.schema import ExceptionFault, RandomFault, RankHung, RankKilled
from chaos.faults.signals.schema import DutyCycle, Sigkill, Sigstop, Sigterm
from chaos.faults.slow.schema import SlowRank
from chaos.faults.slurm.schema import SlurmKillStep, SlurmRequeue
from chaos.faults.soak.schema import Soak

FAULT_KINDS = (
    RankHung, RankKilled, RandomFault, ExceptionFault, CollectiveHang, FaultDuringCheckpoint, CheckpointCorrupt,
    Sigterm, Sigkill, Sigstop, DutyCycle, SlowRank, NanLoss, SpikyLoss, NodeKilled, NodeHung, NodeRejoin,
    SlurmKillStep, SlurmRequeue, LocalCheckpointLost, DiskFull, StorageStall, HostOom,
    Segfault, Abort, GilDeadlock, NetworkPartition, NetworkDegraded, GpuOom, Soak, NicLinkDown,
    NodeUnhealthy,
)
"""Every fault kind a scenario may name (in this order in error messages)."""

Fault = Annotated[Union[FAULT_KINDS], Field(discriminator="type")]  # noqa: UP007 - a union of the registry's classes
