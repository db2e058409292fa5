"""The kinds the supervisor fires from outside the ranks, by their planned classes: the runner's signals, the
node supervisor's node faults, the submitting host's Slurm faults."""

from __future__ import annotations

from chaos.faults.disk.planned import DiskFull, StorageStallOutside
from chaos.faults.network.planned import NetworkDegraded, NetworkPartition
from chaos.faults.nic.planned import NicLinkDown
from chaos.faults.node_health.planned import NodeUnhealthy
from chaos.faults.nodes.planned import NodeHung, NodeKilled, NodeRejoin
from chaos.faults.outside import NodeFault, SignalFault, SlurmFault
from chaos.faults.signals.planned import DutyCycle, Sigkill, Sigstop, Sigterm
from chaos.faults.slurm.planned import SlurmKillStep, SlurmRequeue

SIGNAL_FAULTS: tuple[type[SignalFault], ...] = (Sigterm, Sigkill, Sigstop, DutyCycle, DiskFull, StorageStallOutside, NicLinkDown,
                                               NodeUnhealthy)
NODE_FAULTS: tuple[type[NodeFault], ...] = (NodeKilled, NodeHung, NodeRejoin, NetworkPartition, NetworkDegraded)
LOSSES: tuple[type[NodeFault], ...] = (NodeKilled, NodeHung)
"""Node faults that take a node's ranks out of the round (a spare first trains in the round after one)."""
SLURM_FAULTS: tuple[type[SlurmFault], ...] = (SlurmKillStep, SlurmRequeue)
