"""The memory family as a scenario writes it: host_oom."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from chaos.faults.memory import planned as fired
from chaos.faults.spec import FaultSpec, require_at_step


class HostOom(FaultSpec):
    """The rank's host memory grows from `at_step` until the kernel's OOM killer ends it, inside a memory
    cgroup of the run limited to `limit_bytes` (nothing else on the machine is touched)."""

    type: Literal["host_oom"]
    planned = fired.HostOom
    limit_bytes: int = Field(default=64 << 20, ge=8 << 20)

    @model_validator(mode="after")
    def _one_trigger(self) -> HostOom:
        require_at_step(self)
        if self.rank is None:
            raise ValueError("host_oom grows one rank's memory: give rank")
        return self


def scenario_problems(command: bool) -> list[str]:
    """The rules of host_oom that need the whole scenario."""
    return ["type: host_oom grows a rank of our trainer from inside it; a command has no injector"] if command else []
