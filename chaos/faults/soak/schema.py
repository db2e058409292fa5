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
    """Faults as a Poisson process of mean gap `mtbf_s` on the attempts' training clock, for `duration_s` of it:
    exponential gaps are drawn until their sum passes `duration_s` (so the count is random too), at most `count`.
    Each is of a kind drawn from `kinds` (weighted alike), on a rank drawn from the world (or `rank`); fault j
    strikes in attempt `attempt + j`, its gap after that attempt's training starts. A soak's training must outlast
    `duration_s`, or its last faults never come due."""

    type: Literal["soak"]
    planned = fired.SoakFault
    mtbf_s: float = Field(gt=0)
    duration_s: float = Field(gt=0)
    count: int = Field(ge=1, le=100)
    """The most faults it plans (each needs a restart: max_restarts must allow them)."""
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
        """Every fault of the soak: per fault its gap, then its kind, then its rank, in that order from `rng`;
        always at least one (a soak that plans nothing would prove nothing)."""
        out: list[PlannedFault] = []
        clock = 0.0
        while len(out) < self.count:
            gap = rng.expovariate(1.0 / self.mtbf_s)
            clock += gap
            if clock > self.duration_s and out:
                break
            kind = rng.choice(self.kinds)
            rank = self.rank if self.rank is not None else rng.randrange(world_size)
            out.append(fired.SoakFault(fault_id=f"{fault_id}.{len(out)}", rank=rank, attempt=self.attempt + len(out),
                                       at_step=None, delay_s=gap, kind=kind))
        return out
