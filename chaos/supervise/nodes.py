"""Several nodes on one machine: one launcher agent per node, one c10d rendezvous, and whole-node faults.

A scenario with ``nodes: N`` runs N ft_launcher (or torchrun) agents, exactly as a cluster job runs one per
host: each gets ``--nnodes=N``, the same c10d endpoint and rendezvous id, and its own node identity
(``CHAOS_NODE_ID=node<i>``, which the trainer writes into every event). Node 0 hosts the rendezvous store
(``--rdzv-conf=is_host=true``; the others are clients), as the first node of a Slurm job does, instead of
whichever agent happens to bind the port first. Every agent runs in its own process session with the run's
marker variable, its output goes to ``launcher-node<i>.log``, and launcher lines become runner events
with a ``node`` field.

Node faults fire like the runner's signal faults (chaos/external.py: a step observed in the events, or a
delay into a round) and are delivered from outside, to real processes found by marker and node identity:

- ``node_killed``: SIGKILL to the node's agent and everything it started (rank monitors, workers);
- ``node_hung``: SIGSTOP to every rank of the node; its agent lives on;
- ``node_rejoin``: a replacement agent with the lost node's identity joins the next rendezvous round.

Hot spares (``spares: k``) are extra agents started once the first round trains: the rendezvous is full,
so NVRx's rendezvous keeps them on its redundancy list until a round has room for them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import IO

from chaos.schema.plan import PlannedFault
from chaos.supervise.faults import LOSSES, Armed, NodeFault
from chaos.supervise.launch import (
    LaunchResult,
    LaunchSpec,
    classify,
    marked_pids,
    marked_processes,
    stop_group,
)
from chaos.supervise.signals import EventSteps, ExternalFaults
from runlog.env import ATTEMPT_BASE_VAR, NODE_VAR, RUN_ID_VAR, node_name
from runlog.log import EventLog
from runlog.records import (
    AgentExit,
    AgentStart,
    Deadline,
    FaultInjected,
    Launched,
    LauncherExit,
    LauncherLine,
    Leftover,
    Restart,
)
from trainer import nvrx_compat


def agent_command(command: list[str], is_host: bool) -> list[str]:
    """One agent's command: `command` with the rendezvous store pinned to node 0 (`is_host`)."""
    at = next(i for i, arg in enumerate(command) if arg.startswith("--rdzv-backend=")) + 1
    return [*command[:at], f"--rdzv-conf=is_host={str(is_host).lower()}", *command[at:]]


def node_index(node: str) -> int:
    return int(node.removeprefix("node"))


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


def node_block(index: int, blocks: int) -> int:
    """The GPU block of node ``index``: its own where there are enough; a node beyond them (a spare) takes
    blocks from the last one down. Active nodes always fit (a scenario needs world_size GPUs); a spare
    only trains once a node is lost, and node 0, the rendezvous host, is never a fault target."""
    return index if index < blocks else blocks - 1 - (index - blocks) % blocks


def node_pids(run_id: str, node: str, ranks_only: bool = False) -> list[int]:
    """Live processes of the run on `node` (all of them, or only the ranks: those torchelastic gave a RANK)."""
    return [
        pid for pid, env in marked_processes(run_id).items()
        if env.get(NODE_VAR) == node and (not ranks_only or env.get("RANK", "").isdigit())
    ]


@dataclass(frozen=True)
class ClusterSpec(LaunchSpec):
    """A launch of ``nodes`` agents; ``command`` is one agent's (``--nnodes=N``, c10d on the reserved
    loopback endpoint, the trainer)."""

    nodes: int = 1
    gpu_blocks: tuple[str, ...] = ()
    """A GPU run: each node's CUDA_VISIBLE_DEVICES (``node_block`` picks a node's); empty on CPU."""


@dataclass
class Agent:
    """One launcher agent. Its workers number their attempts `base` + the agent's own restarts: a fresh
    agent (a replacement, a spare) counts its restarts from 0, so the runner hands it the round it joins."""

    node: str
    proc: subprocess.Popen
    base: int
    restarts: int = 0
    lost: bool = False
    """Killed by the runner (a node_killed fault): its exit code is the fault, not the job's."""
    reader: threading.Thread | None = None

    @property
    def attempt(self) -> int:
        return self.base + self.restarts


class Cluster:
    """The agents of one multi-node run; `wait()` returns once every agent has exited (or was killed)."""

    def __init__(self, spec: ClusterSpec, events: EventLog, on_tick: Callable[[], None] = lambda: None):
        self.spec, self.events, self.on_tick = spec, events, on_tick
        self.agents: list[Agent] = []
        self._lock = threading.Lock()

    def start(self, node: str, base: int) -> Agent:
        """Start an agent for `node` whose workers' attempts begin at `base`."""
        spec = self.spec
        env = {
            **spec.env, **nvrx_compat.SIMULATED_NODES_ENV, RUN_ID_VAR: spec.run_id, NODE_VAR: node,
            ATTEMPT_BASE_VAR: str(self.worker_base(base)),
        }
        if spec.gpu_blocks:
            env["CUDA_VISIBLE_DEVICES"] = spec.gpu_blocks[node_block(node_index(node), len(spec.gpu_blocks))]
        log = open(spec.run_dir / f"launcher-{node}.log", "ab")  # noqa: SIM115 - closed by the reader
        proc = subprocess.Popen(
            agent_command(spec.command, is_host=node == node_name(0)), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=spec.cwd, start_new_session=True,
        )
        agent = Agent(node, proc, base)
        with self._lock:
            self.agents.append(agent)
            self.events.write(AgentStart(node, proc.pid, base, node=node))
        agent.reader = threading.Thread(target=self._read, args=(agent, log), daemon=True)
        agent.reader.start()
        return agent

    def worker_base(self, base: int) -> int:
        """What a late agent's workers add to their TORCHELASTIC_RESTART_COUNT to number their attempt:
        the round it joins, unless the launcher already counts rounds there (ft_launcher 0.7)."""
        ft = nvrx_compat.LAUNCHER_MODULE in self.spec.command
        return 0 if ft and nvrx_compat.RESTART_COUNT_IS_ROUND else base

    def lose(self, node: str) -> None:
        """Mark `node`'s running agents as lost: the runner is about to kill them."""
        for agent in self.agents:
            if agent.node == node and agent.proc.poll() is None:
                agent.lost = True

    def wait(self) -> LaunchResult:
        spec, start = self.spec, time.monotonic()
        self.events.write(Launched(command=spec.command, nodes=spec.nodes))
        for i in range(spec.nodes):
            self.start(node_name(i), 0)
        result = LaunchResult(exit_code=None, seconds=0.0)
        try:
            self._watch(start, result)
        except BaseException:
            result.interrupted = True
            self._stop_all()
            raise
        finally:
            for agent in list(self.agents):
                agent.proc.wait()
                if agent.reader is not None:
                    agent.reader.join(timeout=5)
                self.events.write(AgentExit(agent.node, agent.proc.returncode, agent.lost, node=agent.node))
            result.exit_code = self.job_code()
            result.seconds = time.monotonic() - start
            self.events.write(LauncherExit(result.exit_code))
            result.leftovers = self._reap()
            self.on_tick()
        return result

    def job_code(self) -> int:
        """The job's exit code: the first failure among agents the runner did not kill itself, else 0."""
        codes = [a.proc.returncode for a in self.agents if not a.lost]
        return next((code for code in codes if code), 0)

    def _watch(self, start: float, result: LaunchResult) -> None:
        while any(a.proc.poll() is None for a in self.agents):
            if time.monotonic() - start > self.spec.deadline_s:
                result.timed_out = True
                self.events.write(Deadline(self.spec.deadline_s))
                self._stop_all()
                return
            self.on_tick()
            time.sleep(0.1)

    def _stop_all(self) -> None:
        for agent in self.agents:
            stop_group(agent.proc.pid, self.spec.run_id)

    def _read(self, agent: Agent, log: IO[bytes]) -> None:
        with log:
            for raw in agent.proc.stdout or ():
                log.write(raw)
                log.flush()
                line = raw.decode(errors="replace").rstrip()
                hit = classify(line)
                if hit is not None:
                    self._emit_line(agent, hit)

    def _emit_line(self, agent: Agent, hit: LauncherLine) -> None:
        with self._lock:
            if isinstance(hit, Restart):
                agent.restarts += 1
                self.events.attempt = max(self.events.attempt, agent.attempt)
            self.events.write(replace(hit, node=agent.node))

    def _reap(self) -> list[int]:
        """Wait briefly for the run's processes to go; report and kill any that stay."""
        end = time.monotonic() + 3.0
        while (left := marked_pids(self.spec.run_id)) and time.monotonic() < end:
            time.sleep(0.1)
        if left:
            self.events.write(Leftover(left))
        for pid in marked_pids(self.spec.run_id):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        return left


class NodeFaults(ExternalFaults):
    """The plan's node faults, with the triggers of the runner's signal faults, and the spares' arrival."""

    def __init__(self, faults: list[PlannedFault], events: EventLog, cluster: Cluster, spares: int):
        super().__init__([], events, cluster.spec.run_id, EventSteps(cluster.spec.run_dir))
        self.armed = [Armed(f) for f in faults if isinstance(f, NodeFault)]
        self.cluster, self.spares = cluster, spares
        losses = [f.attempt for f in faults if isinstance(f, LOSSES)]
        # A spare first starts workers in the round after the first loss; its own restart count is 0 there.
        self.spare_base = min(losses) + 1 if losses else 0

    def tick(self) -> None:
        super().tick()
        if self.spares and self.last_step.get(0, 0) >= 1:
            first = self.cluster.spec.nodes
            for i in range(first, first + self.spares):
                self.cluster.start(node_name(i), self.spare_base)
            self.spares = 0

    def _fire(self, armed: Armed, now: float) -> None:
        fault, node = armed.fault, armed.fault.target_node
        armed.fired_at, armed.pids = now, fault.targets(self)
        seen = self.last_step.get(fault.attempt)
        # iteration None: a rejoin fires before its round has a step
        self.events.write(FaultInjected(fault.type, fault.fault_id, f"{node} pids {armed.pids}", seen, target_node=node))
        fault.strike(self, armed.pids)

    def pids(self, node: str, ranks_only: bool) -> list[int]:
        return node_pids(self.run_id, node, ranks_only)

    def lose(self, node: str) -> None:
        self.cluster.lose(node)

    def start(self, node: str) -> None:
        """A replacement agent for `node`, in the round the run is in now."""
        self.cluster.start(node, base=self.events.attempt)


def run_cluster(spec: ClusterSpec, plan: list[PlannedFault], events: EventLog, spares: int, tick: Callable[[], None]) -> LaunchResult:
    """Start the nodes' agents, fire the node faults as the run goes, and wait for every agent to end."""
    cluster = Cluster(spec, events)
    faults = NodeFaults(plan, events, cluster, spares)

    def both() -> None:
        faults.tick()
        tick()

    cluster.on_tick = both
    try:
        return cluster.wait()
    finally:
        faults.close()
