"""The checkpoint family as a scenario writes it: fault_during_checkpoint, checkpoint_corrupt, local_checkpoint_lost."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from chaos.faults.checkpoint import planned as fired
from chaos.faults.spec import FaultSpec, require_at_step, require_load_trigger


class FaultDuringCheckpoint(FaultSpec):
    """SIGKILL to the rank while a checkpoint is in flight: the save of `at_step` (sync: inside the save;
    async: after the save was issued, before it is sealed), the NVRx local save of `at_step` (inside this
    rank's write), or the checkpoint load of `attempt`."""

    type: Literal["fault_during_checkpoint"]
    planned = fired.FaultDuringCheckpoint
    during: Literal["save", "local_save", "load"] = "save"

    @model_validator(mode="after")
    def _one_trigger(self) -> FaultDuringCheckpoint:
        if self.during == "load":
            require_load_trigger(self)
        else:
            require_at_step(self)
        return self


class CheckpointCorrupt(FaultSpec):
    """The newest checkpoint truncated or garbled by `rank` just before the load of `attempt`."""

    type: Literal["checkpoint_corrupt"]
    planned = fired.CheckpointCorrupt
    rank: int | None = Field(default=0, ge=0)
    mode: Literal["truncate", "garble"] = "truncate"

    @model_validator(mode="after")
    def _one_trigger(self) -> CheckpointCorrupt:
        require_load_trigger(self)
        return self


class LocalCheckpointLost(FaultSpec):
    """The rank's node loses its local checkpoint folder (a replaced node, a wiped NVMe or tmpfs) just before
    the checkpoint load of `attempt`: the resume must fall back to the persistent checkpoint."""

    type: Literal["local_checkpoint_lost"]
    planned = fired.LocalCheckpointLost

    @model_validator(mode="after")
    def _one_trigger(self) -> LocalCheckpointLost:
        require_load_trigger(self)
        return self
