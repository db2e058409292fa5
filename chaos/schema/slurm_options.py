"""How a scenario's Slurm job is submitted (its ``slurm:`` mapping): sbatch's options and Bridge's plugins."""

from __future__ import annotations

from pydantic import Field, model_validator

from chaos.schema.base import Strict


class SlurmOptions(Strict):
    """What `python -m chaos run --slurm` and `chaos slurm` write into the job (only with requires: slurm)."""

    time_limit_min: int | None = Field(default=None, ge=1)
    """sbatch --time in minutes (None: deadline_s in minutes, plus 5)."""
    preempt_time_s: int | None = Field(default=None, ge=1)
    """sbatch --signal=TERM@N: Slurm sends SIGTERM to the job's steps N s (up to N + 60 s: slurmctld checks
    time limits every 30 s) before the time limit, as Megatron Bridge's PreemptionPlugin (preempt_time)."""
    job_retries: int = Field(default=0, ge=0, le=10)
    """A job whose srun failed requeues itself this many times (FaultTolerancePlugin's num_job_retries_on_failure)."""

    @model_validator(mode="after")
    def _signal_before_limit(self) -> SlurmOptions:
        if self.preempt_time_s is not None:
            if self.time_limit_min is None:
                raise ValueError("preempt_time_s: the signal comes before the time limit; set time_limit_min too")
            if self.preempt_time_s >= self.time_limit_min * 60:
                raise ValueError(f"preempt_time_s: {self.preempt_time_s} is not before the time limit ({self.time_limit_min} min)")
        return self
