"""Several nodes on one machine: one launcher agent per node, one c10d rendezvous, and whole-node faults.

chaos/supervise/launch.py starts and watches the agents; this module hands out their GPUs and fires the
node faults. A scenario with ``nodes: N`` runs N ft_launcher (or torchrun) agents, exactly as a cluster job runs one per
host: each gets ``--nnodes=N``, the same c10d endpoint and rendezvous id, and its own node identity
(``CHAOS_NODE_ID=node<i>``, which the trainer writes into every event). Node 0 hosts the rendezvous store
(``--rdzv-conf=is_host=true``; the others are clients), as the first node of a Slurm job does, instead of
whichever agent happens to bind the port first. Every agent runs in its own process session with the run's
marker variable, its output goes to ``launcher-node<i>.log``, and launcher lines become runner events
with a ``node`` field.

Node faults fire like the runner's signal faults (chaos/supervise/signals.py: a step observed in the events, or a
delay into a round) and are delivered from outside, to real processes found by marker and node identity:

- ``node_killed``: SIGKILL to the node's agent and everything it started (rank monitors, workers);
- ``node_hung``: SIGSTOP to every rank of the node; its agent lives on;
- ``node_rejoin``: a replacement agent with the lost node's identity joins the next rendezvous round;
- ``network_partition``, ``network_degraded``: the node's data link to the others is cut or limited for the
  fault's ``duration_s``, then restored (``link_restored``). Such a run gives every node a network of its
  own, bridged (chaos/supervise/isolation.py, ``node_networks``): each agent runs at its node's address,
  node 0's is the rendezvous endpoint; the faults act on the data link, which gloo's collectives use.

Hot spares (``spares: k``) are extra agents started once the first round trains: the rendezvous is full,
so NVRx's rendezvous keeps them on its redundancy list until a round has room for them.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from chaos.faults.network.planned import NetworkFault
from chaos.faults.network.schema import KINDS as NETWORK_KINDS
from chaos.faults.outside import Armed, NodeFault
from chaos.faults.outside_kinds import LOSSES
from chaos.faults.plan import PlannedFault
from chaos.supervise.isolation import Room, unavailable
from chaos.supervise.launch import Launch, LaunchResult
from chaos.supervise.procs import node_pids, node_ranks
from chaos.supervise.signals import EventSteps, ExternalFaults
from runlog.env import node_name
from runlog.records import FaultInjected, LinkRestored


def visible_gpus() -> list[str]:
    """The GPUs this process may hand out: CUDA_VISIBLE_DEVICES when set, else every device."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g for g in listed.split(",") if g]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def gpu_blocks(gpus: list[str], per_node: int) -> list[str]:
    """The GPUs as CUDA_VISIBLE_DEVICES values of ``per_node`` each: one block per simulated node, since
    every node's ranks count their LOCAL_RANK (their device) from 0, as on separate hosts."""
    return [",".join(gpus[i:i + per_node]) for i in range(0, len(gpus) - per_node + 1, per_node)]


def node_networks(plan: list[PlannedFault], nodes: int) -> tuple[str, ...]:
    """The nodes (spares included) that get a network each: all of them when the plan has a network fault."""
    wanted = any(isinstance(f, NetworkFault) for f in plan)
    return tuple(node_name(i) for i in range(nodes)) if wanted else ()


def lacks_networks(kinds: set[str]) -> str | None:
    """Why this machine cannot run network faults (no namespaces, veths or bridge for the nodes), or None."""
    if not kinds & set(NETWORK_KINDS):
        return None
    why = unavailable()
    return None if why is None else f"{', '.join(sorted(kinds & set(NETWORK_KINDS)))} need a network per node: {why}"


def spare_round(faults: list[PlannedFault]) -> int:
    """The round in which a hot spare first starts workers: the one after the plan's first node loss."""
    losses = [f.attempt for f in faults if isinstance(f, LOSSES)]
    return min(losses) + 1 if losses else 0


class NodeFaults(ExternalFaults):
    """The plan's node faults, with the triggers of the runner's signal faults, and the spares' arrival."""

    def __init__(self, faults: list[PlannedFault], launch: Launch, spares: int, world_size: int):
        spec = launch.spec
        super().__init__([], launch.events, launch.attempts, spec.run_id, EventSteps(spec.run_dir), world_size, run_dir=spec.run_dir)
        self.armed = [Armed(f) for f in faults if isinstance(f, NodeFault)]
        self.launch, self.spares = launch, spares
        self.node_size = world_size // spec.nodes
        # A spare first starts workers in the round after the first loss; its own restart count is 0 there.
        self.spare_base = spare_round(faults)

    def tick(self) -> None:
        super().tick()
        if self.spares and self.last_step.get(0, 0) >= 1:
            first = self.launch.spec.nodes
            for i in range(first, first + self.spares):
                self.launch.start(node_name(i), self.spare_base)
            self.spares = 0

    def _wanted(self, fault: PlannedFault) -> str:
        return fault.target_node

    def _targets(self, fault: NodeFault) -> list[int] | None:
        return fault.targets(self)

    def _fire(self, armed: Armed, now: float, targets: list[int]) -> None:
        fault, node = armed.fault, armed.fault.target_node
        armed.fired_at, armed.pids = now, targets
        seen = self._seen_at_strike(fault.attempt)
        # iteration None: a rejoin fires before its round has a step
        self.events.write(FaultInjected(fault.type, fault.fault_id, f"{node} pids {armed.pids}", seen, target_node=node))
        fault.strike(self, armed.pids)
        if isinstance(fault, NetworkFault):
            armed.next_at = now + fault.duration_s

    def _follow_up(self, armed: Armed, now: float) -> None:
        """A network fault's time is over: its link is restored."""
        fault, armed.next_at = armed.fault, None
        fault.heal(self)
        self.events.write(LinkRestored(fault.type, fault.fault_id, fault.target_node))

    def pids(self, node: str, ranks_only: bool) -> list[int] | None:
        if not ranks_only:
            return node_pids(self.run_id, node)
        found = node_ranks(self.run_id, node, self.attempts.launcher())
        return sorted(found) if len(set(found.values())) == self.node_size else None

    def lose(self, node: str) -> None:
        self.launch.lose(node)

    def start(self, node: str) -> None:
        """A replacement agent for `node`, in the round the run is in now."""
        self.launch.start(node, base=self.attempts.launcher())

    def set_link(self, node: str, up: bool) -> None:
        self._room().set_link(node, up)

    def shape(self, node: str, rate_kbit: int | None, queue_ms: int = 0) -> None:
        self._room().shape(node, rate_kbit, queue_ms)

    def _room(self) -> Room:
        room = self.launch.room
        assert room is not None and room.mode == "node-networks", "a network fault runs with node networks"
        return room


def run_nodes(
    launch: Launch, plan: list[PlannedFault], spares: int, world_size: int, tick: Callable[[], None],
) -> LaunchResult:
    """Start the nodes' agents, fire the node faults as the run goes, and wait for every agent to end."""
    faults = NodeFaults(plan, launch, spares, world_size)

    def both() -> None:
        faults.tick()
        tick()

    launch.on_tick = both
    try:
        return launch.wait()
    finally:
        faults.close()
