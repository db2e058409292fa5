"""What every fault kind is as a scenario's author writes it (``faults:``): its trigger, its target rank and
attempt, and how it is planned (``plan``: its random choices drawn from the scenario's seed, an instance of
its ``planned`` class, the record the side that fires it reads). Each family's schema module derives its kinds
from :class:`FaultSpec`; chaos/faults/registry.py lists them.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar

from pydantic import Field, model_validator

from chaos.faults.plan import PlannedFault
from chaos.strict import Strict


class FaultSpec(Strict):
    rank: int | None = Field(default=None, ge=0)
    """The target rank; None lets the seeded plan choose (random only)."""
    at_step: int | None = Field(default=None, ge=1)
    """Fire just before this step (1-based) computes."""
    after_s: float | None = Field(default=None, ge=0)
    """Fire after base_delay + 0.2*U(0,1)*base_delay seconds (Megatron Bridge's simulate_fault timing)."""
    attempt: int = Field(default=0, ge=0)
    """The restart round in which the fault fires (0: the first launch)."""

    planned: ClassVar[type[PlannedFault]]
    """The kind as planned and fired: its class on the side that fires it."""
    requires: ClassVar[str | None] = None
    """The scenario's `requires` the kind needs (gpu: a CUDA device), or None: any."""
    seam: ClassVar[bool] = False
    """Whether a `command` handed the plan fires it too: the kind strikes before a step and needs only the
    device, which a driver of ours gives it through the trainer's step seam (chaos/hooks/seam.py)."""

    @model_validator(mode="after")
    def _one_trigger(self) -> FaultSpec:
        if (self.at_step is None) == (self.after_s is None):
            raise ValueError("give exactly one trigger: at_step or after_s")
        return self

    def plan(self, fault_id: str, rng: random.Random, world_size: int, command: bool = False) -> PlannedFault:
        """This fault with every random choice drawn from `rng` (the kind and rank of random, then the
        jitter of after_s, fault by fault in the scenario's order); `command`: the scenario runs an external
        trainer, which has no injector (a kind that acts inside our trainer's ranks acts from outside then)."""
        return self._planned(self.planned, fault_id, self.rank, rng)

    def plan_all(self, fault_id: str, rng: random.Random, world_size: int, command: bool = False) -> list[PlannedFault]:
        """Every planned fault this one stands for: itself (a soak stands for many, chaos/faults/soak)."""
        return [self.plan(fault_id, rng, world_size, command)]

    @property
    def last_attempt(self) -> int:
        """The last attempt any of its planned faults strikes in."""
        return self.attempt

    def _planned(self, kind: type[PlannedFault], fault_id: str, rank: int | None, rng: random.Random) -> PlannedFault:
        delay = None if self.after_s is None else self.after_s + 0.2 * rng.random() * self.after_s
        return kind(fault_id=fault_id, rank=rank, attempt=self.attempt, at_step=self.at_step, delay_s=delay, **self._own())

    def _own(self) -> dict[str, Any]:
        """The kind's own fields, named as its planned class names them."""
        return self.model_dump(exclude={"type", "rank", "attempt", "at_step", "after_s"})


def require_at_step(fault: FaultSpec) -> None:
    if fault.at_step is None or fault.after_s is not None:
        raise ValueError(f"{fault.type} fires at a step: give at_step (not after_s)")


def require_load_trigger(fault: FaultSpec) -> None:
    if fault.at_step is not None or fault.after_s is not None:
        raise ValueError(f"{fault.type} fires at the checkpoint load of its attempt: leave out at_step and after_s")
    if fault.attempt < 1:
        raise ValueError(f"{fault.type} breaks a restart's checkpoint load: attempt must be 1 or more")
