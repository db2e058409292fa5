"""The batch script's own steps inside a Slurm job that chaos/supervise/slurm.py wrote, and Slurm's records.

    job.sbatch ─ python -m chaos.supervise.slurm_job start RUN_DIR    attempt base, rendezvous host and port; `launch`
               ─ srun node_task.sh                                   once per node (chaos/supervise/slurm_agent.py)
               ─ python -m chaos.supervise.slurm_job end RUN_DIR CODE --retries N    `launcher_exit`; requeue on failure

Attempts number on across job launches: a requeued job starts at one past the highest attempt in the run
folder (``CHAOS_ATTEMPT_BASE``), as the local runner's relaunch does, so a requeue is one more restart.
The steps import no torch (the batch script runs them before and after the job's work), and
:func:`scontrol` is the one reader of Slurm's records (``scontrol show ... -o``) for every side.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from runlog import names
from runlog.log import EventLog
from runlog.reader import read_events
from runlog.records import LauncherExit
from runlog.slurm_records import JobLaunched, Requeue, RequeueFailed

JOB_FILE = "job_id"
"""The run folder's owner: the id of the one job (and its requeues) that may write there."""
JOB_EVENTS = "job"
"""The event file of the batch script's steps (events/job.jsonl): its first line marks the job's start."""
PORT_BASE, PORT_BLOCK, PORT_SLOTS = 12000, 3, 2500
"""Rendezvous ports: a block of three per job id (rendezvous, rank 0's store, one spare), below the local
runner's range (chaos/supervise/ports.py) and Linux's ephemeral one."""


class JobError(RuntimeError):
    """The job cannot run as generated, or Slurm did not answer; the message is one line."""


def rdzv_port(job_id: int) -> int:
    """The job's rendezvous port: two jobs on one node get different blocks unless their ids are 2500 apart."""
    return PORT_BASE + PORT_BLOCK * (job_id % PORT_SLOTS)


def next_attempt(events: list[dict[str, Any]]) -> int:
    """The first attempt of a job launch: 0, or one past every attempt the run folder has seen."""
    if not any(e["event"] == names.LAUNCH and e["rank"] < 0 for e in events):
        return 0
    return max(e["attempt"] for e in events) + 1


def parse_record(text: str) -> dict[str, str]:
    """`scontrol show ... -o` output as a mapping (values never contain spaces in the fields we read)."""
    return dict(re.findall(r"(\S+?)=(\S*)", text))


def scontrol(*args: str) -> dict[str, str]:
    """One `scontrol show ... -o` record; JobError when scontrol fails."""
    try:
        done = subprocess.run(["scontrol", *args, "-o"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise JobError(f"scontrol {' '.join(args)}: {e}") from None
    if done.returncode != 0:
        raise JobError(f"scontrol {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return parse_record(done.stdout)


def head_address(nodelist: str) -> str:
    """The first node's address (its NodeAddr, which is its hostname on most clusters): the rendezvous host."""
    listed = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30)
    first = listed.stdout.split()[0] if listed.returncode == 0 and listed.stdout.split() else nodelist
    return scontrol("show", "node", first).get("NodeAddr") or first


def start(run_dir: Path) -> str:
    """The batch script's first step: claim the run folder, record the launch; returns base, host and port."""
    job = os.environ["SLURM_JOB_ID"]
    owner = run_dir / JOB_FILE
    if owner.is_file() and owner.read_text().strip() != job:
        raise JobError(f"{run_dir} belongs to job {owner.read_text().strip()}; write a new job (python -m chaos slurm)")
    owner.write_text(job + "\n")
    base = next_attempt(read_events(run_dir))
    nodelist = os.environ["SLURM_JOB_NODELIST"]
    head, port = head_address(nodelist), rdzv_port(int(job))
    log = EventLog(run_dir, JOB_EVENTS, rank=-1, attempt=base)
    log.write(JobLaunched(job, int(os.environ.get("SLURM_RESTART_COUNT", "0")), nodelist, head, port, base))
    log.close()
    return f"{base} {head} {port}"


def end(run_dir: Path, code: int, retries: int) -> int:
    """The batch script's last step: record srun's exit code; a failed job with retries left requeues itself."""
    log = EventLog(run_dir, JOB_EVENTS, rank=-1)
    log.write(LauncherExit(code))
    made = sum(1 for e in read_events(run_dir) if e["event"] == names.RESTART and e.get("requeue"))
    if code != 0 and made < retries:
        job = os.environ["SLURM_JOB_ID"]
        log.write(Requeue(f"scontrol requeue {job}", retries - made - 1))
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            log.write(RequeueFailed(done.stderr.strip()))
    log.close()
    return code


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m chaos.supervise.slurm_job", description="the batch script's steps")
    sub = p.add_subparsers(dest="command", required=True)
    st = sub.add_parser("start", help="claim the run folder and record the launch; prints attempt base, host, port")
    st.add_argument("run_dir", type=Path)
    en = sub.add_parser("end", help="record srun's exit code; requeue a failed job that has retries left")
    en.add_argument("run_dir", type=Path)
    en.add_argument("code", type=int)
    en.add_argument("--retries", type=int, default=0)
    args = p.parse_args(argv)
    try:
        if args.command == "start":
            print(start(args.run_dir))
            return 0
        return end(args.run_dir, args.code, args.retries)
    except JobError as e:
        print(f"chaos: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
