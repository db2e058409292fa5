"""The same scenario on a real Slurm cluster: the job's files, its submission, Slurm's own faults, the verdicts.

``python -m chaos slurm SCENARIO`` writes a run folder (on storage every node mounts) holding the job:

    scenario.yaml plan.json ft.yaml   what `chaos judge` and every rank read, as for a local run
    job.sbatch                         the batch script: sbatch options, then start / srun / end (slurm_job.py)
    node_task.sh                       what srun runs once per node: the node's identity, then its agent
                                       wrapper (slurm_agent.py) around the launcher's argv

``python -m chaos run --slurm SCENARIO`` also submits it with ``sbatch --wait``, fires the scenario's Slurm
faults from this (submitting) host while the job runs (each kind's command, chaos/faults/slurm/planned.py:
``scancel --signal=KILL`` of the running step, ``scontrol requeue``), records the job as Slurm does
(``scontrol show job``: state, exit code, restarts) as a ``slurm_job`` event, and judges the folder exactly
as ``python -m chaos judge`` does. Ctrl-C, SIGTERM, an error or the deadline cancels the job and waits until
Slurm has ended it.

Every value is known when the files are written except what Slurm decides at run time (job id, node ids,
the first node's address); those appear only as whole shell words (``"$SLURM_JOB_ID"``), never inside
another quoted string, and the launcher's own command line is a plain argv. The rendezvous port comes
from the job id (slurm_job.py), so two jobs on one node do not meet.
"""

from __future__ import annotations

import math
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import yaml

from chaos.faults.outside import Armed, SlurmFault
from chaos.faults.outside_kinds import LOSSES
from chaos.faults.plan import PlannedFault, Side, arming, write_plan
from chaos.judge.run import RunOutcome
from chaos.schema.scenario import Scenario, ScenarioError, plan_faults
from chaos.supervise.attempts import AttemptTracker
from chaos.supervise.launch import worker_base
from chaos.supervise.nodes import spare_round
from chaos.supervise.progress import ProgressView
from chaos.supervise.runner import PROJECT_ROOT, judge_run_dir, launcher_command, new_run_dir
from chaos.supervise.signals import EventSteps, ExternalFaults
from chaos.supervise.slurm_job import JOB_EVENTS, JobError, scontrol
from runlog.env import ATTEMPT_BASE_VAR, NODE_VAR, RUN_ID_VAR, STORE_PORT_VAR
from runlog.layout import RunFolder
from runlog.log import EventLog
from runlog.records import Deadline, FaultInjected
from runlog.slurm_records import SlurmCommand, SlurmJob, Submitted
from trainer import nvrx_compat

JOB_SCRIPT, NODE_TASK, SBATCH_LOG = "job.sbatch", "node_task.sh", "sbatch.log"
CLIENTS = ("sbatch", "squeue", "scancel", "scontrol")


def check_cluster(scenario: Scenario) -> None:
    """What a Slurm job cannot do that the local runner can; a one-line ScenarioError names it."""
    name = scenario.name
    for i, fault in enumerate(scenario.faults):
        if fault.type == "node_rejoin":
            raise ScenarioError(f"{name}: faults[{i}]: node_rejoin needs a new allocation on Slurm; use spares")
        if fault.planned in LOSSES and fault.after_s is not None and fault.attempt:
            raise ScenarioError(f"{name}: faults[{i}]: on Slurm a timed node fault fires in the first round only")
        if fault.planned.side is Side.RUNNER:
            raise ScenarioError(
                f"{name}: faults[{i}]: {fault.type} is sent by the local runner; on Slurm use slurm.preempt_time_s "
                "(Slurm's SIGTERM) or slurm_kill_step"
            )
        if getattr(fault, "persistence", None) == "persistent":
            raise ScenarioError(f"{name}: faults[{i}]: a persistent loss fault names the planning host's node; not on Slurm")
    if scenario.command is not None or scenario.relaunch:
        raise ScenarioError(f"{name}: command and relaunch are local-runner features; on Slurm use slurm.job_retries")
    if scenario.launcher == "torchrun" and scenario.config.inprocess_restart.enabled:
        raise ScenarioError(f"{name}: in-process restart under torchrun needs a static rendezvous; not generated for Slurm")


def write_job(scenario: Scenario, run_dir: Path) -> Path:
    """The job's files in `run_dir` (on shared storage); returns the batch script's path."""
    check_cluster(scenario)
    run_dir = run_dir.resolve()
    if any(c.isspace() for c in str(run_dir)):
        raise ScenarioError(f"{run_dir}: a run folder for Slurm cannot contain spaces (#SBATCH lines split on them)")
    folder = RunFolder(run_dir)
    folder.events.mkdir(parents=True, exist_ok=True)
    folder.scenario.write_text(yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))
    overrides = scenario.trainer_overrides(run_dir)
    plan = plan_faults(scenario, scenario.seed)
    write_plan(folder.plan, plan)
    if plan:
        overrides.extend(arming(folder.plan))
    task = run_dir / NODE_TASK
    task.write_text(node_task(scenario, launcher_command(scenario, run_dir, 0, overrides), plan))
    task.chmod(0o755)
    script = run_dir / JOB_SCRIPT
    script.write_text(batch_script(scenario, run_dir))
    return script


def batch_script(scenario: Scenario, run_dir: Path) -> str:
    """job.sbatch: allocate `nodes + spares` nodes, one task each; start, srun the node task, end."""
    nodes = scenario.nodes + scenario.spares
    options = scenario.slurm
    minutes = options.time_limit_min or math.ceil(scenario.deadline_s / 60) + 5
    q = shlex.quote
    sbatch = [
        f"--job-name=chaos-{scenario.name}", f"--nodes={nodes}", "--ntasks-per-node=1", f"--time={minutes}",
        "--requeue", "--open-mode=append", f"--output={run_dir}/slurm-%j.out",
    ]
    if options.preempt_time_s is not None:
        sbatch.append(f"--signal=TERM@{options.preempt_time_s}")
    return "\n".join([
        "#!/bin/bash",
        *(f"#SBATCH {o}" for o in sbatch),
        f"# chaos scenario {scenario.name!r} (seed {scenario.seed}): {scenario.nodes} node(s) x {scenario.node_size} "
        f"ranks, {scenario.spares} spare(s), under {scenario.launcher}.",
        f"# Submit: sbatch {run_dir / JOB_SCRIPT}    Judge afterwards, from anywhere: python -m chaos judge {run_dir}",
        "set -uo pipefail",
        f"RUN_DIR={q(str(run_dir))}",
        f"PY={q(sys.executable)}  # this project's environment, as seen from every node",
        f"cd {q(str(PROJECT_ROOT))}",
        f'export PYTHONPATH={q(str(PROJECT_ROOT))}"${{PYTHONPATH:+:$PYTHONPATH}}"',
        "export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 PYTHONWARNINGS=ignore::FutureWarning",
        f'export {RUN_ID_VAR}="chaos-$SLURM_JOB_ID"  # the marker every process of the run carries',
        "# The first attempt of this launch (a requeue numbers on), the first node's address and the job's port.",
        'START=$("$PY" -m chaos.supervise.slurm_job start "$RUN_DIR") || exit 2',
        f'read -r {ATTEMPT_BASE_VAR} HEAD_ADDR PORT <<< "$START"',
        f"export RUN_DIR PY {ATTEMPT_BASE_VAR} HEAD_ADDR PORT",
        f'srun --nodes={nodes} --ntasks-per-node=1 --kill-on-bad-exit=0 "$RUN_DIR/{NODE_TASK}"',
        f'exec "$PY" -m chaos.supervise.slurm_job end "$RUN_DIR" "$?" --retries {options.job_retries}',
        "",
    ])


def node_task(scenario: Scenario, launcher: list[str], plan: list[PlannedFault]) -> str:
    """node_task.sh: one node's identity and environment, then its agent wrapper around the launcher's argv."""
    runtime = {  # the words Slurm fills in, each a whole shell word
        "--rdzv-endpoint=": '--rdzv-endpoint="$HEAD_ADDR:$PORT"', "--rdzv-id=": '--rdzv-id="$SLURM_JOB_ID"',
    }
    words = ['"$PY"']
    for arg in launcher[1:]:
        raw = next((word for prefix, word in runtime.items() if arg.startswith(prefix)), None)
        words.append(raw or shlex.quote(arg))
        if arg.startswith("--rdzv-backend="):
            words.append('--rdzv-conf=is_host="$IS_HOST"')
    # As the local runner's launcher_env: torchrun logs its restarts at INFO; under ft_launcher rank 0's store
    # takes the port beside the rendezvous. Several agents may share a host (the one-host Slurm's nodes).
    env = ["LOGLEVEL=INFO"] if scenario.launcher == "torchrun" else [f"{STORE_PORT_VAR}=$((PORT + 1))"]
    env += [f"{k}={shlex.quote(v)}" for k, v in nvrx_compat.SIMULATED_NODES_ENV.items()]
    joins = spare_round(plan)
    agent = ['"$PY" -m chaos.supervise.slurm_agent "$RUN_DIR"', f"--active-nodes={scenario.nodes}"]
    if scenario.spares:
        agent += [f"--spare-round={joins}", f"--spare-worker-base={worker_base(launcher, joins)}"]
    if scenario.slurm.preempt_time_s is not None:
        agent.append("--preempt")
    return "\n".join([
        "#!/bin/bash",
        f"# One node's task of chaos scenario {scenario.name!r}: srun runs this file once per node of the job;",
        f"# job.sbatch exported RUN_DIR, PY, {ATTEMPT_BASE_VAR}, HEAD_ADDR and PORT.",
        "set -euo pipefail",
        f'export {NODE_VAR}="node$SLURM_NODEID"',
        'IS_HOST=false; if [ "$SLURM_NODEID" = 0 ]; then IS_HOST=true; fi  # node 0 hosts the c10d rendezvous store',
        f"export {' '.join(env)}",
        f"exec {' '.join(agent)} -- \\",
        "  " + " ".join(words),
        "",
    ])


class SlurmFaults(ExternalFaults):
    """The plan's Slurm faults, fired from the submitting host with the triggers of the runner's signal
    faults (a step of their attempt, seen in the shared folder's events, or `after_s` into it)."""

    def __init__(self, faults: list[PlannedFault], events: EventLog, attempts: AttemptTracker, run_dir: Path, job_id: str):
        super().__init__([], events, attempts, f"chaos-{job_id}", EventSteps(run_dir), run_dir=run_dir)
        self.armed = [Armed(f) for f in faults if isinstance(f, SlurmFault)]
        self.job_id = job_id

    def _wanted(self, fault: PlannedFault) -> str:
        return f"job {self.job_id}"

    def _targets(self, fault: SlurmFault) -> list[int]:
        return []  # Slurm finds the job's processes itself

    def _fire(self, armed: Armed, now: float, targets: list[int]) -> None:
        fault = armed.fault
        armed.fired_at = now
        argv = fault.argv(self)
        self.events.write(FaultInjected(fault.type, fault.fault_id, " ".join(argv), self._seen_at_strike(fault.attempt), attempt=fault.attempt))
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        self.events.write(SlurmCommand(argv, done.returncode, (done.stdout + done.stderr).strip()[-300:]))

    def running_step(self) -> str:
        """The job's newest running step (the srun of the node tasks), or the job when none runs."""
        listed = subprocess.run(["squeue", "-h", "-s", "-j", self.job_id, "-o", "%i"], capture_output=True, text=True, timeout=30)
        numbered = sorted(int(s.partition(".")[2]) for s in listed.stdout.split() if s.partition(".")[2].isdigit())
        return f"{self.job_id}.{numbered[-1]}" if numbered else self.job_id


def submit(scenario: Scenario, run_dir: Path, progress: Callable[[str], None] | None) -> str:
    """`sbatch --wait` the job in `run_dir`; fire its Slurm faults meanwhile; record it as Slurm does; its id."""
    missing = [c for c in CLIENTS if shutil.which(c) is None]
    if missing:
        raise ScenarioError(f"--slurm: Slurm's client commands are not on PATH ({', '.join(missing)} missing)")
    errors = run_dir / SBATCH_LOG  # a file, not a pipe: sbatch's retry messages could fill one while it waits
    with open(errors, "ab") as err:
        proc = subprocess.Popen(
            ["sbatch", "--wait", "--parsable", str(run_dir / JOB_SCRIPT)], stdout=subprocess.PIPE, stderr=err,
            text=True, cwd=run_dir, start_new_session=True,  # Ctrl-C reaches us alone, and we cancel the job
        )
    job_id = _job_id(proc)
    if job_id is None:
        proc.wait()
        raise ScenarioError(f"sbatch refused the job: {errors.read_text(errors='replace').strip()[-300:]}")
    attempts = AttemptTracker()
    events = EventLog(run_dir, "submit", rank=-1, attempt=attempts.running)
    events.write(Submitted(job_id, str(run_dir / JOB_SCRIPT)))
    if progress:
        progress(f"chaos: submitted Slurm job {job_id}; run folder {run_dir}")
    faults = SlurmFaults(plan_faults(scenario, scenario.seed), events, attempts, run_dir, job_id)
    view = ProgressView(run_dir, progress) if progress else None
    try:
        _wait(proc, job_id, faults, view, run_dir, scenario.deadline_s)
    finally:
        if proc.poll() is None:
            cancel(job_id)
            proc.wait()
        record = job_record(job_id, proc.returncode)
        events.write(record)
        if view and progress:
            view.tick()
            progress(f"chaos: Slurm's record of job {job_id}: state {record.state}, exit code {record.exit_code}, "
                     f"restarts {record.restarts}" + (f" ({record.error})" if record.error else ""))
        events.close()
    return job_id


def _job_id(proc: subprocess.Popen) -> str | None:
    """The id `sbatch --parsable` prints once the job is queued; a Ctrl-C meanwhile still cancels that job."""
    try:
        line = proc.stdout.readline() if proc.stdout else ""
    except KeyboardInterrupt:
        line = proc.stdout.readline() if proc.stdout else ""
        if line.split(";")[0].strip().isdigit():
            cancel(line.split(";")[0].strip())
        proc.kill()
        raise
    job_id = line.split(";")[0].strip()
    return job_id if job_id.isdigit() else None


def _wait(proc: subprocess.Popen, job_id: str, faults: SlurmFaults, view: ProgressView | None, run_dir: Path, deadline_s: float) -> None:
    """Until sbatch returns: tick the faults and the view; past the deadline (from the job's start) cancel it."""
    started: float | None = None
    job_events = RunFolder(run_dir).event_file(JOB_EVENTS)
    while proc.poll() is None:
        if view:
            view.tick()
        if started is None and job_events.is_file():
            started = time.monotonic()  # the deadline and after_s count from the job's start, not its wait in the queue
        if started is not None:
            faults.tick()
            if time.monotonic() - started > deadline_s:
                faults.events.write(Deadline(deadline_s))
                cancel(job_id)
                return
        time.sleep(0.2)


def cancel(job_id: str, timeout_s: float = 60.0) -> None:
    """scancel the job and wait until Slurm no longer lists it (its processes are gone once it leaves)."""
    subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        listed = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=30)
        if not listed.stdout.strip():
            return
        time.sleep(0.5)


def job_record(job_id: str, sbatch_code: int | None) -> SlurmJob:
    """The job as Slurm records it (`scontrol show job`; accounting, `sacct`, is often not configured)."""
    try:
        record = scontrol("show", "job", job_id)
    except JobError as e:
        return SlurmJob(job_id, sbatch_code, error=str(e))
    restarts = record.get("Restarts")
    return SlurmJob(
        job_id, sbatch_code, record.get("JobState"), record.get("ExitCode"), int(restarts) if restarts else None,
        record.get("Reason"), record.get("RunTime"), record.get("TimeLimit"), record.get("NodeList"),
    )


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run_on_slurm(
    scenario: Scenario, out_dir: Path, *, scenario_file: Path | None = None, seed: int | None = None, keep: bool = False,
    progress: Callable[[str], None] | None = print,
) -> RunOutcome:
    """Write the job, submit it, wait, judge: `python -m chaos run --slurm`. A SIGTERM to this process
    cancels the job as Ctrl-C does."""
    scenario = scenario.replace(seed=scenario.seed if seed is None else seed)
    check_cluster(scenario)
    run_dir = new_run_dir(out_dir, scenario.name).resolve()
    write_job(scenario, run_dir)
    previous = signal.signal(signal.SIGTERM, _interrupted)
    try:
        submit(scenario, run_dir, progress)
    finally:
        signal.signal(signal.SIGTERM, previous)
    outcome = judge_run_dir(run_dir, scenario, scenario_file=scenario_file, progress=progress)
    if not keep:
        shutil.rmtree(RunFolder(run_dir).checkpoints, ignore_errors=True)
    return outcome
