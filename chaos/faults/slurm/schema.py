"""Slurm's faults as a scenario writes them: slurm_kill_step, slurm_requeue."""

from __future__ import annotations

from typing import Literal

from chaos.faults.slurm import planned as fired
from chaos.faults.spec import FaultSpec


class SlurmKillStep(FaultSpec):
    """`scancel --signal=KILL <job>.<step>` from the submitting host: every process of the job's running
    step (launcher agents, rank monitors, ranks) is killed at once; the batch script sees srun fail and,
    with `slurm.job_retries`, requeues the job (requires: slurm)."""

    type: Literal["slurm_kill_step"]
    planned = fired.SlurmKillStep


class SlurmRequeue(FaultSpec):
    """`scontrol requeue <job>` from the submitting host: Slurm stops the running job and starts it again
    in the same run folder, a new job launch that resumes from the checkpoints (requires: slurm)."""

    type: Literal["slurm_requeue"]
    planned = fired.SlurmRequeue
