"""The records of a job submitted to Slurm (chaos/supervise/slurm*.py write them; docs/events.md, "A Slurm
job's runner events"): its launches and requeues, sbatch's submission, Slurm commands run against it, Slurm's record."""

from __future__ import annotations

from dataclasses import dataclass

from runlog import names
from runlog.records import Record, optional


@dataclass(frozen=True)
class JobLaunched(Record):
    """A launch of a Slurm job, the first and each requeue (the batch script's start step, on node 0)."""

    event = names.LAUNCH
    job_id: str
    restart_count: int
    """Slurm's SLURM_RESTART_COUNT: the job's requeues before this launch."""
    nodelist: str
    head: str
    """The rendezvous host: the first node's address."""
    port: int
    attempt_base: int
    """The launch's first attempt: one past every attempt of the run folder's earlier launches."""


@dataclass(frozen=True)
class Requeue(Record):
    """A failed job requeues itself (the batch script's end step, `slurm.job_retries`): a restart of the job."""

    event = names.RESTART
    line: str
    attempts_left: int
    requeue: bool = True


@dataclass(frozen=True)
class RequeueFailed(Record):
    event = names.REQUEUE_FAILED
    error: str


@dataclass(frozen=True)
class Submitted(Record):
    """sbatch queued the job (the submitting host, `run --slurm`)."""

    event = names.SUBMIT
    job_id: str
    script: str


@dataclass(frozen=True)
class SlurmCommand(Record):
    """A Slurm command the submitting host ran against the job (a Slurm fault), with what it answered."""

    event = names.SLURM_COMMAND
    argv: list[str]
    code: int
    output: str


@dataclass(frozen=True)
class SlurmJob(Record):
    """The job as Slurm records it once it ended (`scontrol show job`), written by the submitting host."""

    event = names.SLURM_JOB
    job_id: str
    sbatch_code: int | None
    state: str | None = None
    """JobState: COMPLETED, FAILED, TIMEOUT, CANCELLED, ..."""
    exit_code: str | None = None
    """ExitCode, ``code:signal``."""
    restarts: int | None = None
    reason: str | None = None
    run_time: str | None = None
    time_limit: str | None = None
    nodelist: str | None = None
    error: str | None = optional()
    """Why Slurm's record could not be read (the other fields are then None)."""
