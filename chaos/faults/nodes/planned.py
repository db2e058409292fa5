"""Faults of a whole simulated node: its pids, and how it is struck."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from chaos.faults.outside import NodeFault, Nodes


@dataclass(frozen=True)
class NodeKilled(NodeFault):
    """SIGKILL to the node's launcher agent and every process it started (a node lost)."""

    type = "node_killed"

    def targets(self, nodes: Nodes) -> list[int] | None:
        return nodes.pids(self.target_node, ranks_only=False) or None

    def strike(self, nodes: Nodes, pids: list[int]) -> None:
        nodes.lose(self.target_node)
        nodes.send(pids, signal.SIGKILL)


@dataclass(frozen=True)
class NodeHung(NodeFault):
    """SIGSTOP to every rank of the node: its agent lives on, its ranks go silent."""

    type = "node_hung"

    def targets(self, nodes: Nodes) -> list[int] | None:
        return nodes.pids(self.target_node, ranks_only=True)

    def strike(self, nodes: Nodes, pids: list[int]) -> None:
        nodes.send(pids, signal.SIGSTOP)


@dataclass(frozen=True)
class NodeRejoin(NodeFault):
    """A replacement agent for a lost node joins the rendezvous (it needs no process to strike)."""

    type = "node_rejoin"

    def strike(self, nodes: Nodes, pids: list[int]) -> None:
        nodes.start(self.target_node)
