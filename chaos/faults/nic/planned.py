"""nic_link_down as planned and fired: the runner writes the port's new state into the run's link state
file that ft_launcher's NIC health check reads; the run folder's files and the launch's fake NIC listing."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from chaos.faults.outside import Armed, SignalFault, Signals
from chaos.faults.plan import PlannedFault

LINK_STATES = "nic-link-state"
"""The run folder's link state files, one per fake NIC: ``<LINK_STATES>/<nic>/ports/1/state`` as sysfs has them."""
TEMPLATE = "{run_dir}/" + LINK_STATES + "/{nic}/ports/1/state"
"""ft_launcher's ``link_state_path_template`` for them (`{run_dir}` the run folder, `{nic}` NVRx's)."""
ACTIVE = "4: ACTIVE"
"""A port's state in sysfs while its link is up."""
NIC_PREFIX = "chaos_ib"


def nic_names(count: int) -> tuple[str, ...]:
    """The fake NICs' names, as /sys/class/infiniband lists them for the launch."""
    return tuple(f"{NIC_PREFIX}{i}" for i in range(count))


def state_file(run_dir: Path, nic: str) -> Path:
    return run_dir / LINK_STATES / nic / "ports" / "1" / "state"


def write_state(run_dir: Path, nic: str, state: str) -> None:
    """`nic`'s port state, replaced whole (NVRx never reads half a file)."""
    path = state_file(run_dir, nic)
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    part.write_text(state + "\n")
    os.replace(part, path)


@dataclass(frozen=True)
class NicLinkDown(SignalFault):
    """NIC `nic` (of `nics` listed) reported in `state` from the fault's step on, through its state file."""

    type = "nic_link_down"
    nics: int
    nic: int
    state: str

    @property
    def names(self) -> tuple[str, ...]:
        return nic_names(self.nics)

    def link_states_up(self, run_dir: Path) -> None:
        """Every fake NIC's port ACTIVE, unless a launch of the run already wrote it (a relaunch finds the
        link as the run left it)."""
        for nic in self.names:
            if not state_file(run_dir, nic).exists():
                write_state(run_dir, nic, ACTIVE)

    def fire(self, armed: Armed, out: Signals, now: float) -> None:
        write_state(out.run_dir, self.names[self.nic], self.state)


def launch_nics(plan: list[PlannedFault], run_dir: Path) -> tuple[str, ...]:
    """The NICs a launch's /sys/class/infiniband lists for the plan's nic_link_down (none without one), their
    ports ACTIVE unless the run already took one down."""
    for fault in plan:
        if isinstance(fault, NicLinkDown):
            fault.link_states_up(run_dir)
            return fault.names
    return ()
