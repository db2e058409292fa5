"""The node health family as a scenario writes it: node_unhealthy."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from chaos.faults.node_health import planned as fired
from chaos.faults.spec import FaultSpec, require_at_step


class NodeUnhealthy(FaultSpec):
    """The node health check daemon (nvhcd, played by the runner) answers unhealthy from `at_step` on, failing
    `check`; ft_launcher asks it before its next rendezvous (NVRx 0.7's --ft-node-health-check-endpoint)."""

    type: Literal["node_unhealthy"]
    planned = fired.NodeUnhealthy
    check: str = Field(default="chaos_node_unhealthy", pattern=r"^[A-Za-z0-9_.-]+$")
    """The failed check the answer names (its ``failed_checks``)."""

    @model_validator(mode="after")
    def _one_trigger(self) -> NodeUnhealthy:
        require_at_step(self)
        if self.rank is not None:
            raise ValueError("node_unhealthy makes the node unhealthy, under every rank: leave out rank")
        return self

    def _own(self) -> dict[str, Any]:
        return {**super()._own(), "ranks": None, "target": "launcher"}


def scenario_problems(launcher: str, nodes: int, on_slurm: bool, count: int) -> list[str]:
    """The rules of node_unhealthy that need the whole scenario (`count`: its node_unhealthy faults)."""
    problems = []
    if on_slurm:
        problems.append("type: node_unhealthy serves the node health service on the local machine; a Slurm job's nodes have none")
    if launcher != "ft_launcher":
        problems.append(f"type: node_unhealthy is asked by ft_launcher's node health check (launcher is {launcher})")
    if nodes > 1:
        problems.append("type: node_unhealthy plays the node health service of a one-node run (nodes: 1)")
    if count > 1:
        problems.append("type: one node_unhealthy per scenario (they share the run's node health service)")
    return problems
