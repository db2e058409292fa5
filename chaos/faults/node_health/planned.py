"""node_unhealthy as planned and fired: the runner writes the run's node health state that the run's node
health service (chaos/supervise/node_health.py) answers from."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from chaos.faults.outside import Armed, SignalFault, Signals
from chaos.faults.plan import PlannedFault

STATE = "node-health"
"""The run folder's node health state: ``unhealthy`` (the failed check's name) and ``answers.log``."""
SOCKET = "nvhcd.sock"
"""The service's Unix domain socket in the run folder, ft_launcher's ``--ft-node-health-check-endpoint``."""


def unhealthy_file(run_dir: Path) -> Path:
    return run_dir / STATE / "unhealthy"


def failed_check(run_dir: Path) -> str | None:
    """The check the node fails now (None: healthy)."""
    try:
        return unhealthy_file(run_dir).read_text().strip()
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class NodeUnhealthy(SignalFault):
    """The node reported unhealthy, failing `check`, from the fault's step on."""

    type = "node_unhealthy"
    check: str

    def fire(self, armed: Armed, out: Signals, now: float) -> None:
        path = unhealthy_file(out.run_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(path.name + ".part")
        part.write_text(self.check + "\n")
        os.replace(part, path)  # the service never reads half a file


def node_health_endpoint(plan: list[PlannedFault], run_dir: Path) -> Path | None:
    """The socket the run's node health service listens on for the plan's node_unhealthy (None without one)."""
    return run_dir / SOCKET if any(isinstance(f, NodeUnhealthy) for f in plan) else None
