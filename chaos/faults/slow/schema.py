"""slow_rank as a scenario writes it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from chaos.faults.slow import planned as fired
from chaos.faults.spec import FaultSpec, require_at_step


class SlowRank(FaultSpec):
    """The rank computes slower from its trigger on (chaos/faults/slow/slowdown.py): each forward pass `factor` times
    as long, or `seconds` more per step, on CPU; a competing CUDA stream on its device on GPU."""

    type: Literal["slow_rank"]
    planned = fired.SlowRank
    factor: float | None = Field(default=None, gt=1)
    seconds: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_amount(self) -> SlowRank:
        if (self.factor is None) == (self.seconds is None):
            raise ValueError("give exactly one slowdown: factor (> 1) or seconds (> 0 per step)")
        require_at_step(self)  # the slowdown is armed before a step, in the step's thread
        return self
