"""The chaos hook inside the trainer: fires this rank's planned faults at a step or after a delay.

Loaded by the trainer only when its config names a plan (``fault_injection.plan``): a run that is not
armed never imports this module.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from chaos.plan import PlannedFault, read_plan
from trainer.components import Component
from trainer.events import EventLog
from trainer.resiliency.ft import fire

if TYPE_CHECKING:
    from trainer.loop import Trainer


class FaultInjector(Component):
    name = "chaos"

    def __init__(self, faults: list[PlannedFault], events: EventLog):
        self.events = events
        # Only this rank's faults of this restart round.
        self.faults = [f for f in faults if f.rank == events.rank and f.attempt == events.attempt]

    @classmethod
    def from_plan_file(cls, path: str, events: EventLog) -> FaultInjector:
        return cls(read_plan(path), events)

    def on_train_start(self, trainer: Trainer, start_iteration: int) -> None:
        for fault in self.faults:
            if fault.delay_s is not None:
                threading.Thread(target=self._fire_later, args=(fault, trainer), daemon=True).start()

    def _fire_later(self, fault: PlannedFault, trainer: Trainer) -> None:
        time.sleep(fault.delay_s)
        fire(self.events, fault.type, trainer.iteration, fault.fault_id, f"after {fault.delay_s:.2f}s")

    def before_step(self, trainer: Trainer, iteration: int) -> None:
        for fault in self.faults:
            if fault.at_step == iteration:
                fire(self.events, fault.type, iteration, fault.fault_id, f"at step {iteration}")
