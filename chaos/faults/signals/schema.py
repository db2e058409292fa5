"""Signal faults as a scenario writes them: sigterm, sigkill, sigstop, duty_cycle."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from chaos.faults.signals import planned as fired
from chaos.faults.spec import FaultSpec


class _SignalFault(FaultSpec):
    """A real signal sent by the runner from outside to real pids: to `rank`, to `ranks`, or to a
    `target` (all ranks, or the launcher). Works on any training command, not only this project's."""

    ranks: list[Annotated[int, Field(ge=0)]] | None = Field(default=None, min_length=1)
    target: Literal["all", "launcher"] | None = None
    process_group: bool = False
    """To the process group each target leads (a rank's data-loader workers too), as a scheduler signals a job."""

    @model_validator(mode="after")
    def _one_target(self) -> _SignalFault:
        given = [name for name in ("rank", "ranks", "target") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one target: rank, ranks or target (all | launcher)")
        return self


class Sigterm(_SignalFault):
    """Preemption: SIGTERM, then SIGKILL to whatever is still alive `grace_s` seconds later."""

    type: Literal["sigterm"]
    planned = fired.Sigterm
    grace_s: float = Field(default=30.0, ge=0)


class Sigkill(_SignalFault):
    """SIGKILL from outside (an OOM killer, a node agent)."""

    type: Literal["sigkill"]
    planned = fired.Sigkill


class Sigstop(_SignalFault):
    """SIGSTOP from outside: the processes hang until something kills them."""

    type: Literal["sigstop"]
    planned = fired.Sigstop


class DutyCycle(_SignalFault):
    """Slowness from outside: `cycles` rounds of SIGSTOP for `stop_s`, then SIGCONT for `run_s`."""

    type: Literal["duty_cycle"]
    planned = fired.DutyCycle
    stop_s: float = Field(gt=0)
    run_s: float = Field(gt=0)
    cycles: int = Field(ge=1)
