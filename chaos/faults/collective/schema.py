"""collective_hang as a scenario writes it."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from chaos.faults.collective import planned as fired
from chaos.faults.spec import FaultSpec, require_at_step


class CollectiveHang(FaultSpec):
    """The rank stops inside the gradient all-reduce of `at_step` (right before it, its peers waiting inside it)."""

    type: Literal["collective_hang"]
    planned = fired.CollectiveHang

    @model_validator(mode="after")
    def _one_trigger(self) -> CollectiveHang:
        require_at_step(self)
        return self
