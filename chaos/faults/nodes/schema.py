"""Node faults as a scenario writes them: node_killed, node_hung, node_rejoin."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from chaos.faults.nodes import planned as fired
from chaos.faults.spec import FaultSpec
from runlog.env import node_name


class _NodeFault(FaultSpec):
    """A fault of a whole node of a multi-node scenario (chaos/supervise/nodes.py), delivered by the runner.

    Node 0 hosts the c10d rendezvous store (as the first node of a cluster job does), so it cannot be lost:
    its store is the rendezvous itself."""

    node: int = Field(ge=1)

    def _own(self) -> dict[str, Any]:
        return {"target_node": node_name(self.node)}


class NodeKilled(_NodeFault):
    """SIGKILL to the node's launcher agent and every process it started (a node lost)."""

    type: Literal["node_killed"]
    planned = fired.NodeKilled


class NodeHung(_NodeFault):
    """SIGSTOP to every rank of the node: its agent lives on, its ranks go silent."""

    type: Literal["node_hung"]
    planned = fired.NodeHung


class NodeRejoin(_NodeFault):
    """A replacement agent for a killed node joins the rendezvous, `after_s` into round `attempt`."""

    type: Literal["node_rejoin"]
    planned = fired.NodeRejoin

    @model_validator(mode="after")
    def _one_trigger(self) -> NodeRejoin:
        if self.after_s is None or self.at_step is not None:
            raise ValueError("node_rejoin fires by time in the round after the loss: give after_s (not at_step)")
        if self.attempt < 1:
            raise ValueError("node_rejoin joins a later rendezvous round: attempt must be 1 or more")
        return self
