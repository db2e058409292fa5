"""gpu_oom as a scenario writes it (requires: gpu)."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from chaos.faults.gpu import planned as fired
from chaos.faults.spec import FaultSpec, require_at_step


class GpuOom(FaultSpec):
    """torch.cuda.OutOfMemoryError on the rank at its step: one allocation larger than its device."""

    type: Literal["gpu_oom"]
    planned = fired.GpuOom
    requires = "gpu"
    seam = True

    @model_validator(mode="after")
    def _one_trigger(self) -> GpuOom:
        require_at_step(self)  # raised inside the step: a delay fires from a timer thread, which has no step to fail
        return self
