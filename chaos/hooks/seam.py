"""The injector inside a trainer this project did not write: a driver of ours hands the plan's in-rank faults a
step seam of that trainer (drivers/megatron_bridge.py wraps Bridge's forward step with it).

A `command` scenario is handed the plan by naming it (``{run_dir}/plan.json``, chaos/schema/command.py), and
only the kinds whose schema says they have a seam (``FaultSpec.seam``: they strike before a step and need
nothing but the device) are accepted there. Their events go to the rank's own event file, as our trainer's.
"""

from __future__ import annotations

from pathlib import Path

from chaos.hooks.injector import FaultInjector
from runlog.log import EventLog
from trainer.components import TrainContext


class StepSeam:
    """This rank's faults of the plan, fired once before each iteration the trainer computes."""

    def __init__(self, plan: str | Path, ctx: TrainContext):
        events = EventLog(Path(plan).parent, f"rank-{ctx.rank}", ctx.rank)
        self.injector = FaultInjector(plan, events)
        self.ctx = ctx
        self.last: int | None = None

    def before(self, iteration: int) -> None:
        """Called before every forward pass of `iteration` (1-based); the faults see each iteration once."""
        if iteration == self.last:
            return
        if self.last is None:
            self.injector.on_train_start(self.ctx, iteration - 1)
        self.last = iteration
        self.injector.before_step(iteration)
