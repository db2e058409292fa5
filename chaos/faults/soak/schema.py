"""soak as a scenario writes it: a mean time between failures, how many, and the kinds to mix."""

from __future__ import annotations

import random
from typing import Literal

from pydantic import Field, model_validator

from chaos.faults.plan import PlannedFault
from chaos.faults.soak import planned as fired
from chaos.faults.spec import FaultSpec

SoakKind = Literal["rank_killed", "rank_hung"]


class Soak(FaultSpec):
    """`count` faults with exponential gaps of mean `mtbf_s` (a Poisson process on the attempts' training clock),
    each of a kind drawn from `kinds` (weighted alike) on a rank drawn from the world (or `rank`); fault j strikes
    in attempt `attempt + j`, its gap after that attempt's training starts."""

    type: Literal["soak"]
    planned = fired.SoakFault
    mtbf_s: float = Field(gt=0)
    count: int = Field(ge=1, le=100)
    kinds: list[SoakKind] = Field(default_factory=lambda: ["rank_killed", "rank_hung"], min_length=1)

    @model_validator(mode="after")
    def _one_trigger(self) -> Soak:
        if self.at_step is not None or self.after_s is not None:
            raise ValueError("soak draws its own triggers from mtbf_s: leave out at_step and after_s")
        return self

    @property
    def last_attempt(self) -> int:
        return self.attempt + self.count - 1

    def plan(self, fault_id: str, rng: random.Random, world_size: int, command: bool = False) -> PlannedFault:
        return self.plan_all(fault_id, rng, world_size, command)[0]

    def plan_all(self, fault_id: str, rng: random.Random, world_size: int, command: bool = False) -> list[PlannedFault]:
        """Every fault of the soak: per fault its gap, then its kind, then its rank, in that order from `rng`."""
        out: list[PlannedFault] = []
        for j in range(self.count):
            gap = rng.expovariate(1.0 / self.mtbf_s)
            kind = rng.choice(self.kinds)
            rank = self.rank if self.rank is not None else rng.randrange(world_size)
            out.append(fired.SoakFault(fault_id=f"{fault_id}.{j}", rank=rank, attempt=self.attempt + j, at_step=None,
                                       delay_s=gap, kind=kind))
        return out
