"""The trainer's hook points. Each resiliency concern is a Component; a disabled one is simply absent.

Call order, per process: ``on_train_start`` once (after the resume), then for every step
``before_step`` -> the step (inside ``section_start/end("step")``; ``on_loss`` for every micro-batch of
every computation) -> ``after_step`` -> ``stop_reason``; saves run inside the "checkpointing" section; ``close`` once at the end, also after an error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from trainer.loop import Trainer


class Component:
    """Base with no-op hooks; a component overrides the hooks it needs."""

    name = "component"

    def on_train_start(self, trainer: Trainer, start_iteration: int) -> None: ...
    def before_step(self, trainer: Trainer, iteration: int) -> None: ...
    def after_step(self, trainer: Trainer, iteration: int, loss: float) -> None: ...

    def on_loss(self, iteration: int, computation: int, loss: torch.Tensor) -> torch.Tensor:
        """A micro-batch's loss before its backward; returned as is, or corrupted (the chaos hook).

        `computation` counts this process's computations of the step: 0 first, then the reruns.
        """
        return loss

    def section_start(self, name: str) -> None: ...
    def section_end(self, name: str) -> None: ...

    def stop_reason(self, trainer: Trainer, iteration: int) -> str | None:
        """A reason to save and stop after this step, or None to go on."""
        return None

    def state_dict(self) -> dict[str, Any]:
        """Plain state saved with each rank's checkpoint state (under 'resiliency/<name>')."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None: ...
    def close(self, trainer: Trainer) -> None: ...
