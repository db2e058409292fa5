"""Loss faults as a scenario writes them: nan_loss, spiky_loss."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from chaos.faults.loss import planned as fired
from chaos.faults.spec import FaultSpec, require_at_step
from runlog.env import node_id


class _LossFault(FaultSpec):
    """The rank's loss corrupted before its backward at `at_step` (the trainer's on_loss hook): `transient`
    in the first computation of the step only, `persistent` in every computation on the faulty node (the
    first launch's node identity), whatever the attempt; a relaunch with another CHAOS_NODE_ID is clean."""

    persistence: Literal["transient", "persistent"] = "transient"

    @model_validator(mode="after")
    def _at_step_only(self) -> _LossFault:
        require_at_step(self)
        return self

    def _own(self) -> dict[str, Any]:
        # The faulty hardware: the planning machine's node identity, the first launch's (a relaunch may move).
        return {**super()._own(), "faulty_node": node_id() if self.persistence == "persistent" else None}


class NanLoss(_LossFault):
    """The loss becomes NaN (and so do the gradients): the rerun state machine's NaN check."""

    type: Literal["nan_loss"]
    planned = fired.NanLoss


class SpikyLoss(_LossFault):
    """The loss is multiplied by `factor`: the rerun state machine's spiky-loss check (non-fatal)."""

    type: Literal["spiky_loss"]
    planned = fired.SpikyLoss
    factor: float = Field(default=1000.0, gt=1)
