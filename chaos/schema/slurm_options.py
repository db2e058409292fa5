"""How a scenario's Slurm job is submitted (its ``slurm:`` mapping): sbatch's options and Bridge's plugins."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from pydantic import Field, model_validator

from chaos.faults.plan import Side
from chaos.faults.registry import Fault
from chaos.schema.expect import Expect
from chaos.strict import Strict


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


def slurm_problems(on_slurm: bool, faults: Sequence[Fault], local_only: bool, options: SlurmOptions, expect: Expect) -> Iterator[str]:
    """Slurm's faults, options and expectations need a Slurm job (`on_slurm`: requires: slurm), and a
    scenario that has them says so; a Slurm job runs this project's trainer, once per job launch (`local_only`:
    the scenario has a command or a relaunch)."""
    for i, fault in enumerate(faults):
        if fault.planned.side is not Side.SLURM:
            continue
        if not on_slurm:
            yield f"faults[{i}].type: {fault.type} is delivered by Slurm: set requires: slurm"
        if fault.rank is not None:
            yield f"faults[{i}].rank: a {fault.type} fault acts on the whole job, not a rank"
    if on_slurm:
        if local_only:
            yield ("requires: slurm: a Slurm job runs this project's trainer, without command or relaunch "
                   "(a job requeues itself: slurm.job_retries)")
        return
    if options != SlurmOptions():
        yield "slurm: options of a Slurm job: set requires: slurm"
    for name in ("slurm_job_state", "slurm_exit_code"):
        if getattr(expect, name) is not None:
            yield f"expect.{name}: recorded by Slurm: set requires: slurm"
