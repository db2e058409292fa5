"""The fault kinds the supervisor fires from outside the ranks: each one a planned-fault record and how it
strikes. Signal faults (chaos/supervise/signals.py sends them) go to real pids of the job; node faults
(chaos/supervise/nodes.py) to a whole simulated node's agent and ranks.

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
    fired_at: float | None = None
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

    def pids(self, node: str, ranks_only: bool) -> list[int]: ...
    def send(self, pids: list[int], sig: signal.Signals, group: bool = False) -> None: ...
    def lose(self, node: str) -> None: ...
    def start(self, node: str) -> None: ...


@dataclass(frozen=True)
class NodeFault(PlannedFault):
    """A fault of the whole node `target_node` (its identity, node<i>)."""

    side = Side.NODE
    target_node: str

    def targets(self, nodes: Nodes) -> list[int]:
        return []

    def strike(self, nodes: Nodes, pids: list[int]) -> None: ...


@dataclass(frozen=True)
class NodeKilled(NodeFault):
    """SIGKILL to the node's launcher agent and every process it started (a node lost)."""

    type = "node_killed"

    def targets(self, nodes: Nodes) -> list[int]:
        return nodes.pids(self.target_node, ranks_only=False)

    def strike(self, nodes: Nodes, pids: list[int]) -> None:
        nodes.lose(self.target_node)
        nodes.send(pids, signal.SIGKILL)


@dataclass(frozen=True)
class NodeHung(NodeFault):
    """SIGSTOP to every rank of the node: its agent lives on, its ranks go silent."""

    type = "node_hung"

    def targets(self, nodes: Nodes) -> list[int]:
        return nodes.pids(self.target_node, ranks_only=True)

    def strike(self, nodes: Nodes, pids: list[int]) -> None:
        nodes.send(pids, signal.SIGSTOP)


@dataclass(frozen=True)
class NodeRejoin(NodeFault):
    """A replacement agent for a lost node joins the rendezvous."""

    type = "node_rejoin"

    def strike(self, nodes: Nodes, pids: list[int]) -> None:
        nodes.start(self.target_node)


SIGNAL_FAULTS: tuple[type[SignalFault], ...] = (Sigterm, Sigkill, Sigstop, DutyCycle)
NODE_FAULTS: tuple[type[NodeFault], ...] = (NodeKilled, NodeHung, NodeRejoin)
LOSSES: tuple[type[NodeFault], ...] = (NodeKilled, NodeHung)
"""Node faults that take a node's ranks out of the round (a spare first trains in the round after one)."""
