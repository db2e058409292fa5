"""The network family as a scenario writes it: network_partition, network_degraded."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from pydantic import Field, model_validator

from chaos.faults.network import planned as fired
from chaos.faults.spec import FaultSpec, require_at_step
from runlog.env import node_name


class _NetworkFault(FaultSpec):
    """A fault of one node's link in a multi-node scenario, fired at a step by the node supervisor. Node 0
    hosts the rendezvous store; with two nodes, cutting node 1 off is the same partition."""

    node: int = Field(ge=1)
    duration_s: float = Field(gt=0)
    """How long the link stays cut or limited; then it is restored."""

    @model_validator(mode="after")
    def _one_trigger(self) -> _NetworkFault:
        require_at_step(self)
        return self

    def _own(self) -> dict[str, Any]:
        return {"target_node": node_name(self.node), "duration_s": self.duration_s}


class NetworkPartition(_NetworkFault):
    """The node is cut off from the others (its link down) for `duration_s` seconds, from `at_step`."""

    type: Literal["network_partition"]
    planned = fired.NetworkPartition


class NetworkDegraded(_NetworkFault):
    """The node's link passes at most `rate_kbit` through a queue of `queue_ms` for `duration_s` seconds."""

    type: Literal["network_degraded"]
    planned = fired.NetworkDegraded
    rate_kbit: int = Field(ge=8)
    queue_ms: int = Field(default=100, ge=1, le=10_000)

    def _own(self) -> dict[str, Any]:
        return {**super()._own(), "rate_kbit": self.rate_kbit, "queue_ms": self.queue_ms}


KINDS = ("network_partition", "network_degraded")


def scenario_problems(fault: _NetworkFault, nodes: int, deadline_s: float | None) -> Iterator[str]:
    """What a network fault needs of its scenario: several nodes, and a link back before the deadline
    (each a problem after ``faults[i].``)."""
    if nodes < 2:
        yield f"type: {fault.type} cuts a node's link to the others: needs nodes: 2 or more"
    if deadline_s is not None and fault.duration_s >= deadline_s:
        yield f"duration_s: {fault.duration_s:g} is not shorter than deadline_s ({deadline_s:g})"
