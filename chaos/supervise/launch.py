"""Start a job's launcher agents in their own process sessions, watch them, and leave nothing behind.

A one-node run has one agent (ft_launcher or torchrun); a multi-node run one per simulated node, exactly as
a cluster job runs one per host (chaos/supervise/nodes.py). Every agent runs with ``start_new_session=True``
and the run's marker (CHAOS_RUN_ID), which every worker inherits. An agent's output goes to its log
(``launcher.log``, or ``launcher-<node>.log``); lines that show the launcher or NVRx's rank monitor acting on
a fault become runner events, stamped as they arrive, and its restart lines move the attempt tracker. At each
later round's start (an agent's rendezvous line) the processes of earlier rounds still alive are recorded with
what they hold, and followed until each is gone (chaos/supervise/leftovers.py). On the
deadline, Ctrl-C or any error every live agent's process group is killed; afterwards any process still
carrying the marker is a leftover: it is reported (a failure of the run) and killed. With
``LaunchSpec.isolation`` the agents start inside the launch's namespaces (chaos/supervise/isolation.py: the
run's own network, or one per simulated node, and private tmpfs mounts), which end with the launch: a
namespace or link of the run still there afterwards is a leftover too. The launch event says which network
the run had (``network``: its own, or the machine's with claimed ports, and why). The deadline does not
count the attempts' start-ups (chaos/supervise/deadline.py).
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from chaos.adapters.launcher import NEXT_ROUND, follow
from chaos.supervise import deathsig
from chaos.supervise.attempts import AttemptTracker
from chaos.supervise.deadline import DeadlineClock
from chaos.supervise.isolation import DATA_IF, Isolation, Room
from chaos.supervise.leftovers import LeftoverWatch
from chaos.supervise.procs import command_line, kill_run, marked_pids, stop_group
from runlog.env import ATTEMPT_BASE_VAR, NODE_VAR, RUN_ID_VAR, node_name
from runlog.layout import RunFolder
from runlog.log import EventLog
from runlog.records import (
    AgentExit,
    AgentStart,
    Deadline,
    Launched,
    LauncherExit,
    LauncherLine,
    Leftover,
    Record,
    Restart,
)
from trainer import nvrx_compat


@dataclass(frozen=True)
class LaunchSpec:
    command: list[str]
    """One agent's command (for several nodes: with ``--nnodes=N`` and the c10d rendezvous they share)."""
    env: dict[str, str]
    run_dir: Path
    deadline_s: float
    """Of the launch's time less its attempts' start-ups (DeadlineClock)."""
    run_id: str
    cwd: Path | None = None
    nodes: int = 1
    """Agents started together, one per simulated node (node0..); 1: a one-node launch."""
    gpu_blocks: tuple[str, ...] = ()
    """A multi-node GPU run: each node's CUDA_VISIBLE_DEVICES (``node_block`` picks a node's); empty on CPU."""
    isolation: Isolation | None = None
    """The namespaces the agents start in (None: the machine's, as a stand-in launcher in a unit test)."""


@dataclass
class LaunchResult:
    exit_code: int | None
    timed_out: bool = False
    interrupted: bool = False
    leftovers: list[int] = field(default_factory=list)
    isolation_left: list[str] = field(default_factory=list)
    """Namespaces or links of the launch still there after it (chaos/supervise/isolation.py ``Room.close``)."""
    counted_s: float = 0.0
    """The launch's time that counted against its deadline."""


@dataclass
class Agent:
    node: str | None
    """Its simulated node; None for the one agent of a one-node launch."""
    proc: subprocess.Popen
    lost: bool = False
    """Killed by the runner (a node_killed fault): its exit code is the fault, not the job's."""
    reader: threading.Thread | None = None

    @property
    def key(self) -> str:
        return self.node or "launcher"


def agent_command(command: list[str], is_host: bool, local_addr: str | None = None) -> list[str]:
    """One agent's command: `command` with the rendezvous store pinned to node 0 (`is_host`), and, on a node
    with a network of its own, its address (what the launcher hands its workers as MASTER_ADDR on node 0)."""
    at = next(i for i, arg in enumerate(command) if arg.startswith("--rdzv-backend=")) + 1
    own = [] if local_addr is None else [f"--local-addr={local_addr}"]
    return [*command[:at], f"--rdzv-conf=is_host={str(is_host).lower()}", *own, *command[at:]]


def worker_base(command: list[str], base: int) -> int:
    """What a late agent's workers add to their TORCHELASTIC_RESTART_COUNT to number their attempt: the
    round it joins (`base`), unless the launcher already counts rounds there (ft_launcher 0.7)."""
    ft = any(nvrx_compat.LAUNCHER_MODULE in arg for arg in command)
    return 0 if ft and nvrx_compat.RESTART_COUNT_IS_ROUND else base


def node_block(index: int, blocks: int) -> int:
    """The GPU block of node ``index``: its own where there are enough; a node beyond them (a spare) takes
    blocks from the last one down. Active nodes always fit (a scenario needs world_size GPUs); a spare
    only trains once a node is lost, and node 0, the rendezvous host, is never a fault target."""
    return index if index < blocks else blocks - 1 - (index - blocks) % blocks


class Launch:
    """The agents of one launch; `wait()` returns once every agent has exited (or was killed).

    ``on_tick`` runs every 0.1 s of the watch (the runner's faults and progress view); ``on_line`` gets
    every output line of a one-node launch in order, with the round of the workers that wrote it
    (``AttemptTracker.printing``: a restart line moves it only once the agent's rendezvous line says the last
    round's workers are gone).
    """

    def __init__(
        self, spec: LaunchSpec, events: EventLog, attempts: AttemptTracker,
        on_tick: Callable[[], None] = lambda: None, on_line: Callable[[str, int], None] | None = None,
    ):
        self.spec, self.events, self.attempts = spec, events, attempts
        self.on_tick, self.on_line = on_tick, on_line
        self.agents: list[Agent] = []
        self.room: Room | None = None
        self._lock = threading.Lock()
        self._rounds: set[int] = set()
        """The rounds whose start was checked for leftovers (each agent of a round prints its rendezvous line)."""
        self.leftovers = LeftoverWatch(spec.run_id, RunFolder(spec.run_dir).checkpoints, self._write)
        self.clock = DeadlineClock(spec.deadline_s, spec.run_dir)

    def start(self, node: str | None, base: int) -> Agent:
        """Start the agent of `node` (None: the one of a one-node launch), whose round begins at `base`."""
        spec, folder = self.spec, RunFolder(self.spec.run_dir)
        env = {ATTEMPT_BASE_VAR: str(base), **spec.env, RUN_ID_VAR: spec.run_id}
        command, room = spec.command, self.room
        if node is not None:
            env.update({**nvrx_compat.SIMULATED_NODES_ENV, NODE_VAR: node, ATTEMPT_BASE_VAR: str(worker_base(command, base))})
            own = room is not None and room.mode == "node-networks"
            command = agent_command(spec.command, is_host=node == node_name(0), local_addr=room.address(node) if own else None)
            if own:
                env["GLOO_SOCKET_IFNAME"] = DATA_IF  # gloo's collectives on the node's data link
            if spec.gpu_blocks:
                index = int(node.removeprefix("node"))
                env["CUDA_VISIBLE_DEVICES"] = spec.gpu_blocks[node_block(index, len(spec.gpu_blocks))]
        log = open(folder.launcher_log if node is None else folder.agent_log(node), "ab")  # noqa: SIM115 - closed by the reader
        proc = subprocess.Popen(
            deathsig.wrap(command, enter=room.holder_pid(node) if room else None), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            cwd=spec.cwd, start_new_session=True,
        )
        agent = Agent(node, proc)
        with self._lock:
            self.agents.append(agent)
            self.attempts.joined(agent.key, base)
            if node is None:
                self.events.write(Launched(command=spec.command, pid=proc.pid, network=self._network()))
            else:
                self.events.write(AgentStart(node, proc.pid, base, node=node))
        agent.reader = threading.Thread(target=self._read, args=(agent, log), daemon=True)
        agent.reader.start()
        return agent

    def lose(self, node: str) -> None:
        """Mark `node`'s running agents as lost: the runner is about to kill them."""
        for agent in self.agents:
            if agent.node == node and agent.proc.poll() is None:
                agent.lost = True

    def wait(self) -> LaunchResult:
        spec, start = self.spec, time.monotonic()
        base = self.attempts.launcher()
        self._rounds.add(base)  # a launch's first round: the last launch's processes were all killed at its end
        self.clock.launched(base, start)
        result = LaunchResult(exit_code=None)
        try:
            self.room = spec.isolation.start(spec.env, spec.run_id) if spec.isolation else None
            if spec.nodes == 1:
                self.start(None, base)
            else:
                self.events.write(Launched(command=spec.command, nodes=spec.nodes, network=self._network()))
                for i in range(spec.nodes):
                    self.start(node_name(i), base)
            self._watch(result)
        except BaseException:
            result.interrupted = True
            self._stop_all()
            raise
        finally:
            for agent in list(self.agents):
                agent.proc.wait()
                if agent.reader is not None:
                    agent.reader.join(timeout=5)
                if agent.node is not None:
                    self.events.write(AgentExit(agent.node, agent.proc.returncode, agent.lost, node=agent.node))
            result.exit_code, result.counted_s = self.job_code(), self.clock.counted(time.monotonic())
            self.events.write(LauncherExit(result.exit_code))
            result.leftovers, result.isolation_left = self._reap()
            self.leftovers.stop()
            self.on_tick()
        return result

    def _network(self) -> str | None:
        return None if self.room is None else self.room.describe()

    def job_code(self) -> int:
        """The job's exit code: the first failure among agents the runner did not kill itself, else 0."""
        codes = [a.proc.returncode for a in self.agents if not a.lost]
        return next((code for code in codes if code), 0)

    def _watch(self, result: LaunchResult) -> None:
        while any(a.proc.poll() is None for a in self.agents):
            if self.clock.counted(time.monotonic()) > self.spec.deadline_s:
                result.timed_out = True
                self.events.write(Deadline(self.spec.deadline_s))
                self._stop_all()
                return
            self.on_tick()
            time.sleep(0.1)

    def _stop_all(self) -> None:
        for agent in self.agents:
            if agent.proc.poll() is None:  # an agent reaped already: its pid may be another's group by now
                stop_group(agent.proc.pid, self.spec.run_id)

    def _read(self, agent: Agent, log: IO[bytes]) -> None:
        with log:
            follow(agent.proc.stdout or (), log, lambda hit: self._launcher_line(agent, hit), lambda line: self._line(agent, line))

    def _line(self, agent: Agent, line: str) -> None:
        if NEXT_ROUND.search(line):
            round_ = self.attempts.next_round(agent.key)
            self._round_starts(round_)
        else:
            round_ = self.attempts.printing(agent.key)
        if self.on_line is not None:
            self.on_line(line, round_)

    def _round_starts(self, round_: int) -> None:
        """A round's workers are about to start: record what earlier rounds left running (chaos/supervise/leftovers.py)."""
        with self._lock:
            if round_ in self._rounds:
                return
            self._rounds.add(round_)
        self.leftovers.attempt_starts(round_)

    def _write(self, record: Record) -> None:
        with self._lock:
            self.events.write(record)

    def _launcher_line(self, agent: Agent, hit: LauncherLine) -> None:
        with self._lock:
            if isinstance(hit, Restart):
                self.clock.attempt_began(self.attempts.restarted(agent.key), time.monotonic())
            self.events.write(hit if agent.node is None else replace(hit, node=agent.node))

    def _reap(self) -> tuple[list[int], list[str]]:
        """Wait briefly for the run's processes to go and kill any that stay, then end the launch's namespaces;
        report the processes that stayed and what of the namespaces is still there."""
        end = time.monotonic() + 3.0
        while (left := marked_pids(self.spec.run_id)) and time.monotonic() < end:
            time.sleep(0.1)
        commands = [command_line(pid) for pid in left]
        kill_run(self.spec.run_id)  # by marker, not by the reaped agents' process groups
        held = self.room.close() if self.room is not None else []
        if left or held:
            self.events.write(Leftover(left, isolation=held or None, commands=commands or None))
        return left, held
