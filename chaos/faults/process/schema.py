"""The process family as a scenario writes it: rank_killed, rank_hung, random (one of the two), exception."""

from __future__ import annotations

import random
from typing import Literal

from pydantic import model_validator

from chaos.faults.plan import PlannedFault
from chaos.faults.process import planned as fired
from chaos.faults.spec import FaultSpec, require_at_step


class RankKilled(FaultSpec):
    """SIGKILL to the rank (a crashed process)."""

    type: Literal["rank_killed"]
    planned = fired.RankKilled


class RankHung(FaultSpec):
    """SIGSTOP to the rank (a hung process: alive, silent)."""

    type: Literal["rank_hung"]
    planned = fired.RankHung


class RandomFault(FaultSpec):
    """rank_killed or rank_hung on a rank, both chosen from the scenario seed."""

    type: Literal["random"]
    planned = fired.RankKilled
    """Or RankHung: drawn at planning."""

    def plan(self, fault_id: str, rng: random.Random, world_size: int, command: bool = False) -> PlannedFault:
        kind = rng.choice([fired.RankHung, fired.RankKilled])
        rank = self.rank if self.rank is not None else rng.randrange(world_size)
        return self._planned(kind, fault_id, rank, rng)


class ExceptionFault(FaultSpec):
    """A Python exception raised in the step on the rank (a bug, a failed assertion): the rank exits 1."""

    type: Literal["exception"]
    planned = fired.ExceptionFault
    message: str = "injected by the chaos plan"

    @model_validator(mode="after")
    def _one_trigger(self) -> ExceptionFault:
        require_at_step(self)  # raised inside the step: a delay fires from a timer thread, which has no step to fail
        return self
