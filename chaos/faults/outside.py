"""What a fault fired from outside the ranks is: a signal to real pids of the job (:class:`SignalFault`,
sent by chaos/supervise/signals.py), a fault of a whole node's agent and ranks (:class:`NodeFault`,
chaos/supervise/nodes.py; on Slurm chaos/supervise/slurm_agent.py), or a Slurm command against the whole job
run from the host that submitted it (:class:`SlurmFault`, chaos/supervise/slurm.py).

A kind acts through the side that fires it (:class:`Signals`, :class:`Nodes`, :class:`Job`), and keeps what
changes as the fault goes (follow-up signals, duty cycles) in its :class:`Armed` state, never in itself.
Standard library and the plan contract only.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, Protocol

from chaos.faults.plan import PlannedFault, Side


@dataclass
class Armed:
    """A planned supervisor fault and where it is in its life: waiting, fired, follow-ups due."""

    fault: PlannedFault
    due_since: float | None = None
    """When its trigger came (its step, its delay); it fires once its targets are there."""
    fired_at: float | None = None
    missed: bool = False
    """Its targets never appeared: it was not injected."""
    pids: list[int] = field(default_factory=list)
    next_at: float | None = None
    """When the next signal is due: the grace's SIGKILL, or the duty cycle's next SIGSTOP/SIGCONT."""
    cycle: int = 0
    stopped: bool = False


class Signals(Protocol):
    run_dir: Path
    """The run folder (a fault on the run's storage reaches it through a target's mount namespace)."""

    def send(self, pids: list[int], sig: signal.Signals, group: bool = False) -> None:
        """`sig` to each pid, or (`group`) to the process group each pid leads."""

    def survivors(self, armed: Armed) -> list[int]:
        """What of the fault's targets is still alive (for the launcher: all of its session)."""

    def environ(self, pid: int) -> dict[str, str]:
        """A target's environment ({} once it is gone)."""


@dataclass(frozen=True)
class SignalFault(PlannedFault):
    """A signal to `rank`, to `ranks`, or to a `target` (all ranks, or the launcher); with `process_group`, to
    the process group each target leads (a rank leads its own: its data-loader workers are in it), as a
    scheduler signals every process of a job."""

    side = Side.RUNNER
    ranks: list[int] | None
    target: Literal["all", "launcher"] | None
    process_group: bool = field(default=False, kw_only=True)

    first: ClassVar[signal.Signals]

    def fire(self, armed: Armed, out: Signals, now: float) -> None:
        out.send(armed.pids, self.first, self.process_group)

    def follow_up(self, armed: Armed, out: Signals, now: float) -> None:
        armed.next_at = None


class Nodes(Protocol):
    """The simulated nodes of a run, as a node fault acts on them."""

    def pids(self, node: str, ranks_only: bool) -> list[int] | None:
        """Every process of the node, or (`ranks_only`) those of its ranks in the round the run is in:
        None until every rank of the node has one."""
    def send(self, pids: list[int], sig: signal.Signals, group: bool = False) -> None: ...
    def lose(self, node: str) -> None: ...
    def start(self, node: str) -> None: ...


@dataclass(frozen=True)
class NodeFault(PlannedFault):
    """A fault of the whole node `target_node` (its identity, node<i>)."""

    side = Side.NODE
    target_node: str

    def targets(self, nodes: Nodes) -> list[int] | None:
        """The pids it strikes; None while they are not there yet (it waits, chaos/supervise/signals.py)."""
        return []

    def strike(self, nodes: Nodes, pids: list[int]) -> None: ...


class Job(Protocol):
    """A submitted Slurm job, as a Slurm fault acts on it."""

    job_id: str

    def running_step(self) -> str:
        """``<job>.<step>`` of the job's newest running step (the srun of its node tasks), else the job's id."""


@dataclass(frozen=True)
class SlurmFault(PlannedFault):
    """A fault Slurm delivers to the whole job on request of the submitting host: the command it runs."""

    side = Side.SLURM

    def argv(self, job: Job) -> list[str]: ...
