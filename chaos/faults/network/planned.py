"""Network faults as the node supervisor fires them: what they change on a node's link, and how it is undone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from chaos.faults.outside import NodeFault, Nodes


class Links(Nodes, Protocol):
    """The simulated nodes' links, as a network fault acts on them (chaos/supervise/isolation.py's Room)."""

    def set_link(self, node: str, up: bool) -> None: ...
    def shape(self, node: str, rate_kbit: int | None, queue_ms: int = 0) -> None: ...


@dataclass(frozen=True)
class NetworkFault(NodeFault):
    """A change to `target_node`'s link for `duration_s` seconds, struck once its ranks train."""

    duration_s: float

    def targets(self, nodes: Nodes) -> list[int] | None:
        return nodes.pids(self.target_node, ranks_only=True)

    def heal(self, links: Links) -> None:
        """Undo the change (the link as it was)."""


@dataclass(frozen=True)
class NetworkPartition(NetworkFault):
    """The node's port on the bridge goes down: nothing reaches it or leaves it, no error is returned."""

    type = "network_partition"

    def strike(self, nodes: Links, pids: list[int]) -> None:
        nodes.set_link(self.target_node, up=False)

    def heal(self, links: Links) -> None:
        links.set_link(self.target_node, up=True)


@dataclass(frozen=True)
class NetworkDegraded(NetworkFault):
    """Both ends of the node's link pass at most `rate_kbit`, through a queue of `queue_ms` of traffic."""

    type = "network_degraded"
    rate_kbit: int
    queue_ms: int

    def strike(self, nodes: Links, pids: list[int]) -> None:
        nodes.shape(self.target_node, self.rate_kbit, self.queue_ms)

    def heal(self, links: Links) -> None:
        links.shape(self.target_node, None)
