"""The fault kinds the supervisor fires from outside the ranks: each one a planned-fault record and how it
strikes. Signal faults (chaos/supervise/signals.py sends them) go to real pids of the job; node faults
(chaos/supervise/nodes.py, on Slurm chaos/supervise/slurm_agent.py) to a whole node's agent and ranks;
Slurm faults (chaos/supervise/slurm.py) are Slurm commands against the whole job, run from the host that
submitted it.

A kind acts through the side that fires it (:class:`Signals`, :class:`Nodes`), and keeps what changes as
the fault goes (follow-up signals, duty cycles) in its :class:`Armed` state, never in itself.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Protocol

from chaos.schema.plan import PlannedFault, Side


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
    def send(self, pids: list[int], sig: signal.Signals, group: bool = False) -> None:
        """`sig` to each pid, or (`group`) to the process group each pid leads."""

    def survivors(self, armed: Armed) -> list[int]:
        """What of the fault's targets is still alive (for the launcher: all of its session)."""


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


@dataclass(frozen=True)
class Sigterm(SignalFault):
    """Preemption: SIGTERM, then SIGKILL to whatever is still alive `grace_s` seconds later."""

    type = "sigterm"
    grace_s: float

    def fire(self, armed: Armed, out: Signals, now: float) -> None:
        out.send(armed.pids, signal.SIGTERM, self.process_group)
        armed.next_at = now + self.grace_s

    def follow_up(self, armed: Armed, out: Signals, now: float) -> None:
        armed.next_at = None  # the grace is over: what is still alive is killed, as a scheduler does
        out.send(out.survivors(armed), signal.SIGKILL, self.process_group)


@dataclass(frozen=True)
class Sigkill(SignalFault):
    type = "sigkill"
    first = signal.SIGKILL


@dataclass(frozen=True)
class Sigstop(SignalFault):
    type = "sigstop"
    first = signal.SIGSTOP


@dataclass(frozen=True)
class DutyCycle(SignalFault):
    """`cycles` rounds of SIGSTOP for `stop_s`, then SIGCONT for `run_s`."""

    type = "duty_cycle"
    stop_s: float
    run_s: float
    cycles: int

    def fire(self, armed: Armed, out: Signals, now: float) -> None:
        self.follow_up(armed, out, now)

    def follow_up(self, armed: Armed, out: Signals, now: float) -> None:
        if armed.stopped:
            out.send(armed.pids, signal.SIGCONT, self.process_group)
            armed.stopped, armed.cycle = False, armed.cycle + 1
            armed.next_at = now + self.run_s if armed.cycle < self.cycles else None
        else:
            out.send(armed.pids, signal.SIGSTOP, self.process_group)
            armed.stopped, armed.next_at = True, now + self.stop_s


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


@dataclass(frozen=True)
class SlurmKillStep(SlurmFault):
    """SIGKILL from Slurm to every process of the job's running step at once (agents, rank monitors, ranks)."""

    type = "slurm_kill_step"

    def argv(self, job: Job) -> list[str]:
        return ["scancel", "--signal=KILL", job.running_step()]


@dataclass(frozen=True)
class SlurmRequeue(SlurmFault):
    """Slurm takes the running job back (SIGTERM, KillWait, SIGKILL) and starts it again in the same folder."""

    type = "slurm_requeue"

    def argv(self, job: Job) -> list[str]:
        return ["scontrol", "requeue", job.job_id]


SIGNAL_FAULTS: tuple[type[SignalFault], ...] = (Sigterm, Sigkill, Sigstop, DutyCycle)
NODE_FAULTS: tuple[type[NodeFault], ...] = (NodeKilled, NodeHung, NodeRejoin)
LOSSES: tuple[type[NodeFault], ...] = (NodeKilled, NodeHung)
"""Node faults that take a node's ranks out of the round (a spare first trains in the round after one)."""
SLURM_FAULTS: tuple[type[SlurmFault], ...] = (SlurmKillStep, SlurmRequeue)
