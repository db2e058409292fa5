"""The NIC family as a scenario writes it: nic_link_down."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from chaos.faults.nic import planned as fired
from chaos.faults.spec import FaultSpec, require_at_step


class NicLinkDown(FaultSpec):
    """A port of the node's InfiniBand NIC leaves the ACTIVE state at `at_step` (its sysfs state file says
    `state`), seen by ft_launcher's NIC link state health check before its next rendezvous (NVRx 0.7)."""

    type: Literal["nic_link_down"]
    planned = fired.NicLinkDown
    nics: int = Field(default=2, ge=1, le=16)
    """How many NICs the launch's /sys/class/infiniband lists (chaos_ib0, chaos_ib1, ...)."""
    nic: int = Field(default=0, ge=0)
    """The one whose port goes down."""
    state: str = Field(default="1: DOWN", pattern=r"^(\d+: )?[A-Z_]+$")
    """What its state file says from then on, as sysfs writes it (``1: DOWN``, ``2: INIT``, ...)."""

    @model_validator(mode="after")
    def _one_trigger(self) -> NicLinkDown:
        require_at_step(self)
        if self.rank is not None:
            raise ValueError("nic_link_down takes the node's link down, under every rank: leave out rank")
        if self.nic >= self.nics:
            raise ValueError(f"nic: {self.nic} is not one of the {self.nics} NICs listed (0 to {self.nics - 1})")
        if self.state.split(": ")[-1] == "ACTIVE":
            raise ValueError(f"state: {self.state!r} is the link up, not down")
        return self

    def _own(self) -> dict[str, Any]:
        return {**super()._own(), "ranks": None, "target": "launcher"}


def scenario_problems(
    launcher: str, nodes: int, on_slurm: bool, count: int, nic_check: bool | None, template: str | None,
) -> list[str]:
    """The rules of nic_link_down that need the whole scenario (`count`: its nic_link_down faults;
    `nic_check`, `template`: its ft.enable_nic_healthcheck and ft.link_state_path_template)."""
    problems = []
    if on_slurm:
        problems.append("type: nic_link_down lists the NICs in the local launch's mount namespace; a Slurm job's nodes have none")
    if launcher != "ft_launcher":
        problems.append(f"type: nic_link_down is read by ft_launcher's NIC link state health check (launcher is {launcher})")
    if nodes > 1:
        problems.append("type: nic_link_down lists the NICs of a one-node run (nodes: 1)")
    if count > 1:
        problems.append("type: one nic_link_down per scenario (they share the listed NICs)")
    if nic_check is None:
        problems.append("type: nic_link_down needs ft.enable_nic_healthcheck set (true: NVRx 0.7 checks the link before "
                        "each rendezvous; false: nothing reads it)")
    if template is not None:
        problems.append("type: nic_link_down points ft.link_state_path_template at the run's link state files: leave it out")
    return problems
