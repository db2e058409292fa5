"""Slurm's faults: the Slurm command the submitting host runs against the job."""

from __future__ import annotations

from dataclasses import dataclass

from chaos.faults.outside import Job, SlurmFault


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
