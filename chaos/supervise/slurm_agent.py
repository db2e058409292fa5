"""One node's launcher agent inside a Slurm job: what srun runs once per node (node_task.sh `exec`s it).

    python -m chaos.supervise.slurm_agent RUN_DIR --active-nodes N [--spare-round R --spare-worker-base W]
        [--preempt] -- <the launcher's argv>

It is the node's side of what the local supervisor does (chaos/supervise/launch.py, nodes.py): it starts
the launcher agent, copies its output to ``launcher-<node>.log`` and turns the lines that show detection and
restarts into runner events (chaos/adapters/launcher.py), fires the node's own node faults from the plan
(each kind strikes through this node, as it does through a simulated one), records Slurm's preemption
signal when the scenario asked for one, and kills whatever of the run its launcher left on the node. A
spare (a node past the active ones) starts once this launch's first round trains, so that it waits as the
spare. It imports no torch: the launcher it starts does.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import FrameType

from chaos.adapters.launcher import follow
from chaos.faults.outside import Armed, NodeFault
from chaos.faults.outside_kinds import NODE_FAULTS
from chaos.faults.plan import PlannedFault, read_plan
from chaos.supervise.attempts import AttemptTracker
from chaos.supervise.procs import command_line, node_pids
from chaos.supervise.scratch import make_tmp_dir
from chaos.supervise.signals import EventSteps, ExternalFaults
from chaos.supervise.slurm_job import JobError, scontrol
from runlog import names
from runlog.env import ATTEMPT_BASE_VAR, NODE_VAR, RUN_ID_VAR, node_name
from runlog.layout import RunFolder
from runlog.log import EventLog
from runlog.reader import EventTail
from runlog.records import AgentExit, AgentStart, FaultInjected, LauncherLine, Leftover, Record, Restart

PREEMPTION = "slurm.preempt_time_s"
"""The fault id of Slurm's preemption signal: it comes from the scenario's slurm options, not its faults."""


class NodeWatch(ExternalFaults):
    """This node's node faults of this job launch, fired as the local supervisor fires them (at a step of
    their attempt, or `after_s` into it); each kind strikes through this node (the `Nodes` it acts on)."""

    def __init__(self, run_dir: Path, node: str, base: int, attempts: AttemptTracker):
        plan = RunFolder(run_dir).plan
        mine = [f for f in read_plan(plan, NODE_FAULTS) if f.target_node == node] if plan.is_file() else []
        events = EventLog(run_dir, f"watch-{node}", rank=-1, attempt=attempts.running)
        super().__init__([], events, attempts, os.environ[RUN_ID_VAR], EventSteps(run_dir), run_dir=run_dir)
        self.armed = [Armed(f) for f in mine if f.attempt >= base]  # an earlier launch fired the others
        self.node, self.lost = node, False

    def _wanted(self, fault: PlannedFault) -> str:
        return self.node

    def _targets(self, fault: NodeFault) -> list[int] | None:
        return fault.targets(self)

    def _fire(self, armed: Armed, now: float, targets: list[int]) -> None:
        fault = armed.fault
        armed.fired_at, armed.pids = now, targets
        iteration = self._seen_at_strike(fault.attempt)
        self.events.write(FaultInjected(
            fault.type, fault.fault_id, f"{self.node} pids {armed.pids}", iteration, target_node=self.node, attempt=fault.attempt,
        ))
        fault.strike(self, armed.pids)

    def pids(self, node: str, ranks_only: bool) -> list[int] | None:
        """The run's processes on the node, but this wrapper (it outlives a node_killed to record its end);
        None while the node has none of them yet."""
        return [pid for pid in node_pids(self.run_id, node, ranks_only) if pid != os.getpid()] or None

    def lose(self, node: str) -> None:
        self.lost = True  # the launcher's exit is the fault's, not the job's

    def start(self, node: str) -> None:
        raise JobError("node_rejoin needs a new allocation on Slurm (chaos slurm refuses it)")

    def close(self) -> None:
        super().close()
        self.events.close()


class Agent:
    """One node's launcher agent, its output, its node faults, Slurm's signal, and what it leaves behind."""

    def __init__(self, run_dir: Path, argv: list[str], base: int, round_: int, worker_base: int, preempt: bool):
        self.run_dir, self.argv, self.base, self.round = run_dir, argv, base, round_
        self.node = os.environ[NODE_VAR]
        self.worker_base = worker_base
        self.attempts = AttemptTracker(round_)
        self.attempts.joined(self.node, round_)
        self.events = EventLog(run_dir, f"agent-{self.node}", rank=-1, attempt=self.attempts.launcher)
        self.lock = threading.Lock()
        """The launcher's lines are written from the reader thread, the rest from the main loop."""
        self.preempt = preempt and self.node == node_name(0)  # one record of the job's one signal
        self.term_at: tuple[float, float] | None = None
        """(wall, mono) of the first SIGTERM Slurm sent."""
        self.recorded = False

    def run(self) -> int:
        # A handler, not SIG_IGN: every process of the step gets Slurm's signal, and this one outlives it to
        # see the launcher out; the launcher gets the default disposition back when it starts.
        signal.signal(signal.SIGTERM, self._on_term)
        tmp = make_tmp_dir()  # ft_launcher's IPC sockets; removed below, or by the next run's sweep if this dies
        env = {**os.environ, "TMPDIR": str(tmp), ATTEMPT_BASE_VAR: str(self.worker_base)}
        watch = NodeWatch(self.run_dir, self.node, self.base, self.attempts)
        try:
            with open(RunFolder(self.run_dir).agent_log(self.node), "ab") as log:
                proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
                step = f"{os.environ.get('SLURM_JOB_ID')}.{os.environ.get('SLURM_STEP_ID')}"
                self._write(AgentStart(self.node, proc.pid, self.round, node=self.node, step=step))
                reader = threading.Thread(target=follow, args=(proc.stdout, log, self._launcher_line), daemon=True)
                reader.start()
                while proc.poll() is None:
                    watch.tick()
                    self._record_term()
                    time.sleep(0.1)
                reader.join(timeout=5)
            self._record_term()
        finally:
            watch.close()
            shutil.rmtree(tmp, ignore_errors=True)
        self._write(AgentExit(self.node, proc.returncode, watch.lost, node=self.node))
        self._reap()
        self.events.close()
        if watch.lost:  # as locally: a node the scenario killed does not fail the job
            return 0
        return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        if self.term_at is None:
            self.term_at = (time.time(), time.monotonic())

    def _write(self, record: Record, at: tuple[float, float] | None = None) -> None:
        with self.lock:
            self.events.write(record, at)

    def _launcher_line(self, hit: LauncherLine) -> None:
        with self.lock:
            if isinstance(hit, Restart):
                self.attempts.restarted(self.node)
            self.events.write(replace(hit, node=self.node))

    def _record_term(self) -> None:
        """Slurm's --signal=TERM@N, as the preemption fault it is: its grace ends at the job's time limit.

        Only while Slurm still runs the job with time left: the SIGTERM of an scancel, a requeue or the time
        limit itself comes with the job already ending, and is no preemption warning."""
        if self.term_at is None or self.recorded or not self.preempt:
            return
        self.recorded = True
        wall, mono = self.term_at
        try:
            job = scontrol("show", "job", os.environ["SLURM_JOB_ID"])
            end = job.get("EndTime", "")
            grace = time.mktime(time.strptime(end, "%Y-%m-%dT%H:%M:%S")) - wall  # Slurm's stamps are local time
        except (JobError, ValueError):
            return
        if job.get("JobState") != "RUNNING" or grace <= 0:
            return
        detail = f"from Slurm, {grace:.0f} s before the time limit ({end})"
        params = {"target": "all", "signal": "SIGTERM", "grace_s": grace}
        self._write(FaultInjected("sigterm", PREEMPTION, detail, None, params=params), at=(wall, mono))

    def _reap(self) -> None:
        """Wait briefly for the run's processes on this node to go; report and kill any that stay."""
        end = time.monotonic() + 3.0
        while (left := self._others()) and time.monotonic() < end:
            time.sleep(0.1)
        if left:
            self._write(Leftover(left, commands=[command_line(pid) for pid in left]))
        for pid in self._others():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _others(self) -> list[int]:
        return [pid for pid in node_pids(os.environ[RUN_ID_VAR], self.node) if pid != os.getpid()]


def wait_for_training(run_dir: Path, base: int, poll_s: float = 0.5) -> None:
    """Return once a rank of this job launch logged a step, or an agent of it ended (the job is over)."""
    tail = EventTail(run_dir)
    while not any(e["event"] in (names.STEP, names.AGENT_EXIT) and e["attempt"] >= base for e in tail.poll()):
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cut = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser(prog="python -m chaos.supervise.slurm_agent", epilog="then -- and the launcher's argv",
                                description="one node's launcher agent in a Slurm job")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--active-nodes", type=int, required=True, help="nodes that train from the start; the rest are spares")
    p.add_argument("--spare-round", type=int, default=0, help="the round a spare first trains in (after the first node loss)")
    p.add_argument("--spare-worker-base", type=int, default=0, help="what a spare's workers add to their restart count")
    p.add_argument("--preempt", action="store_true", help="record Slurm's SIGTERM as the scenario's preemption")
    args = p.parse_args(argv[:cut])
    launcher = argv[cut + 1 :]
    if not launcher:
        p.error("give the launcher's command line after --")
    base = int(os.environ.get(ATTEMPT_BASE_VAR, "0"))
    spare = int(os.environ.get("SLURM_NODEID", "0")) >= args.active_nodes
    if spare:
        wait_for_training(args.run_dir, base)
    round_, worker = (args.spare_round, args.spare_worker_base) if spare else (0, 0)
    try:
        return Agent(args.run_dir, launcher, base, base + round_, base + worker, args.preempt).run()
    except JobError as e:
        print(f"chaos: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
