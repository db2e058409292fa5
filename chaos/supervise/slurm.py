"""The same scenario on a real cluster: an sbatch script, and a node-side watcher for node faults.

``python -m chaos slurm SCENARIO.yaml`` writes a script that allocates ``nodes + spares`` nodes and starts
one launcher agent per node with srun, each with the same ``--nnodes``, c10d rendezvous on the first
node's hostname (which hosts the store: ``is_host=true`` there only) and its own ``CHAOS_NODE_ID``. The
run folder lives on shared storage: the scenario copy and the fault plan are written there before srun,
every rank appends its events there, each agent's output goes to ``launcher-node<i>.log``, and
``python -m chaos judge RUN_DIR`` judges it afterwards from any machine.

Faults: the trainer-side plan (rank_killed, rank_hung, nan_loss, ...) is read by every rank from the run
folder, unchanged. Node faults have no runner on a cluster, so each srun task starts
``python -m chaos.supervise.slurm watch`` beside its agent: it reads the step events from the shared run folder and
fires its own node's node_killed (SIGKILL to every process of the run on the node, found by the marker and
node identity, as chaos/nodes.py does here) and node_hung (SIGSTOP to the node's ranks). node_rejoin needs a
new allocation, which a script cannot make: use ``spares`` (agents that wait in the rendezvous) instead.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import signal
import sys
import time
from pathlib import Path

import yaml

from chaos.schema.plan import PlannedFault, arming, read_plan
from chaos.schema.scenario import Scenario, ScenarioError, plan_faults
from chaos.supervise.faults import NodeHung, NodeKilled
from chaos.supervise.procs import alive, node_pids
from chaos.supervise.signals import EventSteps
from runlog.env import NODE_VAR, RUN_ID_VAR
from runlog.log import EventLog
from runlog.records import FaultInjected, SignalSent
from trainer import nvrx_compat

RDZV_PORT = 29500
WATCHED = (NodeKilled, NodeHung)


def check_cluster_faults(scenario: Scenario) -> None:
    """Node faults the node-side watcher can fire: at a step, or by time in the first round."""
    for i, fault in enumerate(scenario.faults):
        if fault.type == "node_rejoin":
            raise ScenarioError(f"{scenario.name}: faults[{i}]: node_rejoin needs a new allocation on Slurm; use spares")
        if fault.planned in WATCHED and fault.after_s is not None and fault.attempt:
            raise ScenarioError(f"{scenario.name}: faults[{i}]: on Slurm a timed node fault fires in the first round only")


def _heredoc(path: str, text: str) -> str:
    return f"cat > \"{path}\" <<'CHAOS_EOF'\n{text.rstrip()}\nCHAOS_EOF"


def _agent_command(scenario: Scenario) -> str:
    """One node's launcher command, as the srun task runs it (shell variables resolved on the node)."""
    ft = [] if scenario.launcher == "torchrun" else [
        f"--term-timeout={scenario.ft.term_timeout:g}", '--ft-cfg-path="$RUN_DIR/ft.yaml"',
    ]
    module = "torch.distributed.run" if scenario.launcher == "torchrun" else nvrx_compat.LAUNCHER_MODULE
    here = "@RUN_DIR@"  # quoted as a literal, then spliced back in as "$RUN_DIR" for the node's shell to expand
    quoted = [shlex.quote(o) for o in (*scenario.trainer_overrides(here), *arming(f"{here}/plan.json"))]
    overrides = [q.replace(here, "'\"$RUN_DIR\"'") for q in quoted]
    return " ".join([
        f"python -m {module}", "--rdzv-backend=c10d", '--rdzv-endpoint="$HEAD:$PORT"', '--rdzv-conf=is_host="$IS_HOST"',
        '--rdzv-id="$SLURM_JOB_ID"', f"--nnodes={scenario.nodes}", f"--nproc-per-node={scenario.node_size}",
        f"--max-restarts={scenario.max_restarts}", *ft, "-m trainer", f"--recipe {shlex.quote(scenario.recipe)}",
        *overrides,
    ])


def sbatch_script(scenario: Scenario, out_dir: str, seed: int | None = None) -> str:
    """The sbatch script that runs `scenario` on `nodes + spares` cluster nodes, run folder under `out_dir`."""
    check_cluster_faults(scenario)
    seed = scenario.seed if seed is None else seed
    nodes = scenario.nodes + scenario.spares
    plan = {"faults": [f.to_json() for f in plan_faults(scenario, seed)]}
    copy = yaml.safe_dump({**scenario.model_dump(mode="json"), "seed": seed}, sort_keys=False)
    ft_yaml = yaml.safe_dump(nvrx_compat.ft_config_section(scenario.ft.model_dump(exclude={"term_timeout"})))
    minutes = math.ceil(scenario.deadline_s / 60) + 5  # the agents' start and the exit barrier on top
    task = "\n".join([
        'export CHAOS_NODE_ID="node$SLURM_NODEID"',
        'IS_HOST=$([ "$SLURM_NODEID" = 0 ] && echo true || echo false)',
        "# A spare starts once the first round trains, so that it, not a node the plan targets, waits as the spare.",
        f'if [ "$SLURM_NODEID" -ge {scenario.nodes} ]; then',
        '  python -m chaos.supervise.slurm wait-for-step "$RUN_DIR"',
        "fi",
        'python -m chaos.supervise.slurm watch "$RUN_DIR" "$CHAOS_NODE_ID" &',
        "WATCH=$!",
        f'{_agent_command(scenario)} > "$RUN_DIR/launcher-$CHAOS_NODE_ID.log" 2>&1',
        "CODE=$?",
        'kill "$WATCH" 2>/dev/null',
        "exit $CODE",
    ])
    return "\n".join([
        "#!/bin/bash",
        f"#SBATCH --job-name=chaos-{scenario.name}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --time={minutes}",
        "#SBATCH --output=chaos-%x-%j.out",
        f"# Generated by `python -m chaos slurm` for scenario {scenario.name!r} (seed {seed}): {scenario.nodes} nodes",
        f"# x {scenario.node_size} ranks, {scenario.spares} hot spare(s). The run folder must be on storage every node",
        "# mounts. Afterwards, from anywhere: python -m chaos judge <run folder>.",
        "set -uo pipefail",
        f'RUN_DIR="{out_dir}/{scenario.name}-$SLURM_JOB_ID"',
        'mkdir -p "$RUN_DIR/events"',
        'HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)  # node0: hosts the rendezvous store',
        f"PORT={RDZV_PORT}",
        f'export {RUN_ID_VAR}="chaos-$SLURM_JOB_ID"  # the marker every process of the run carries',
        "export PYTHONUNBUFFERED=1",
        _heredoc("$RUN_DIR/scenario.yaml", copy),
        _heredoc("$RUN_DIR/plan.json", json.dumps(plan, indent=1)),
        _heredoc("$RUN_DIR/ft.yaml", ft_yaml),
        "export RUN_DIR HEAD PORT",
        "python -c \"from runlog.log import EventLog; EventLog('$RUN_DIR', 'runner', rank=-1).emit('launch')\"",
        f"srun --nodes={nodes} --ntasks-per-node=1 --kill-on-bad-exit=0 bash -c {shlex.quote(task)}",
        "CODE=$?",
        "python -c \"from runlog.log import EventLog; EventLog('$RUN_DIR', 'runner', rank=-1).emit('launcher_exit', code=$CODE)\"",
        "exit $CODE",
        "",
    ])


def watch(run_dir: Path, node: str, poll_s: float = 0.5) -> None:
    """Fire this node's node faults from the plan, as the runner does on one machine; returns when done."""
    faults = [f for f in read_plan(run_dir / "plan.json", WATCHED) if f.target_node == node]
    events = EventLog(run_dir, f"watch-{node}", rank=-1, attempt=0)
    steps, start = EventSteps(run_dir), time.monotonic()
    seen: dict[int, int] = {}
    while faults:
        for attempt, step in steps.poll():
            seen[attempt] = max(step, seen.get(attempt, 0))
        due = [f for f in faults if _due(f, seen, time.monotonic() - start)]
        for fault in due:
            _fire(fault, node, events, seen.get(fault.attempt))
            faults.remove(fault)
        time.sleep(poll_s)
    events.close()


def _due(fault: PlannedFault, seen: dict[int, int], elapsed: float) -> bool:
    if fault.at_step is not None:
        return seen.get(fault.attempt, 0) >= fault.at_step
    return elapsed >= (fault.delay_s or 0.0)


def _fire(fault: PlannedFault, node: str, events: EventLog, iteration: int | None) -> None:
    # Not the watcher itself nor the srun task's shell, which exits with the agent's exit code.
    spared = {os.getpid(), os.getppid()}
    pids = [p for p in node_pids(os.environ[RUN_ID_VAR], node, isinstance(fault, NodeHung)) if p not in spared and alive(p)]
    events.write(FaultInjected(fault.type, fault.fault_id, f"{node} pids {pids}", iteration, target_node=node, attempt=fault.attempt))
    sig = signal.SIGKILL if isinstance(fault, NodeKilled) else signal.SIGSTOP
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            continue
        events.write(SignalSent(sig.name, pid, attempt=fault.attempt))


def wait_for_step(run_dir: Path, poll_s: float = 1.0) -> None:
    """Return once a rank of the run logged a step (a spare's start waits for the first round to train)."""
    steps = EventSteps(run_dir)
    while not steps.poll():
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    """``python -m chaos.supervise.slurm watch RUN_DIR NODE``: the node-side watcher an sbatch script starts;
    ``wait-for-step RUN_DIR``: what a spare's task waits on before it starts its agent."""
    p = argparse.ArgumentParser(prog="python -m chaos.supervise.slurm")
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("watch", help="fire this node's node faults from the run folder's plan")
    w.add_argument("run_dir")
    w.add_argument("node", help=f"this node's identity ({NODE_VAR})")
    s = sub.add_parser("wait-for-step", help="return once a rank of the run logged a step")
    s.add_argument("run_dir")
    args = p.parse_args(argv)
    if args.command == "watch":
        watch(Path(args.run_dir), args.node)
    else:
        wait_for_step(Path(args.run_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
