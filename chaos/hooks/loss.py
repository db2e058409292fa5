"""Loss faults for the rerun state machine: nan_loss and spiky_loss, on a rank at a step.

The loss of every micro-batch is corrupted before its backward (the trainer's ``on_loss`` hook), so the
gradients are as wrong as the loss and a rerun really recomputes. ``transient``: only the first computation
of the step in its attempt (the rerun in place is clean). ``persistent``: every computation on the faulty
node, the first launch's node identity recorded in the plan, in every attempt; a relaunch under another
``CHAOS_NODE_ID`` computes clean results, as another machine would.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from chaos.schema.plan import PlannedFault
from runlog.env import node_id


def is_persistent(fault: PlannedFault) -> bool:
    return fault.options.get("persistence") == "persistent"


class LossFaults:
    """This rank's loss faults; `emit` logs a fault_injected event (once per computation)."""

    def __init__(self, faults: list[PlannedFault], emit: Callable[[PlannedFault, int | None, str], None]):
        self.faults, self.emit = faults, emit
        self.node = node_id()
        self._announced: set[tuple[str, int, int]] = set()

    def corrupt(self, iteration: int, computation: int, loss: torch.Tensor) -> torch.Tensor:
        for fault in self.faults:
            if fault.at_step != iteration or not self._active(fault, computation):
                continue
            key = (fault.fault_id, iteration, computation)
            if key not in self._announced:
                self._announced.add(key)
                self.emit(fault, iteration, f"{fault.options['persistence']}, computation {computation} on {self.node}")
            factor = float("nan") if fault.type == "nan_loss" else fault.options["factor"]
            loss = loss * factor
        return loss

    def _active(self, fault: PlannedFault, computation: int) -> bool:
        if is_persistent(fault):
            return fault.options["node"] == self.node
        return computation == 0
