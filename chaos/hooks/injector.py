"""The chaos hook inside the trainer: fires this rank's planned faults at a step, after a delay, inside a
gradient all-reduce, inside a checkpoint save or load, or on the checkpoint folder before a restart loads it.

Loaded by the trainer only when its config names a plan (``fault_injection.plan``): a run that is not
armed never imports this module. Signal faults (sigterm, sigkill, ...) are not fired here: the runner
sends them from outside (chaos.external).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from chaos.hooks.loss import LossFaults, is_persistent
from chaos.hooks.storage import corrupt_newest
from chaos.schema.plan import PlannedFault, read_plan
from chaos.schema.scenario import LOSS_FAULTS, SIGNAL_FAULTS
from runlog.log import EventLog
from runlog.records import FaultInjected
from trainer.components import Component
from trainer.resiliency.ft import fire

if TYPE_CHECKING:
    import torch

    from trainer.loop import Trainer


class InjectedFault(RuntimeError):
    """The exception an `exception` fault raises inside the step."""


class FaultInjector(Component):
    name = "chaos"

    def __init__(self, faults: list[PlannedFault], events: EventLog, checkpoint_dir: str | None = None):
        self.events = events
        # Only this rank's faults of this restart round; signal faults come from the runner.
        self.faults = [
            f for f in faults
            if f.rank == events.rank and (f.attempt == events.attempt or is_persistent(f)) and f.type not in SIGNAL_FAULTS
        ]
        self._loss_faults = LossFaults([f for f in self.faults if f.type in LOSS_FAULTS], self._emit)
        self._step = 0
        self._slowdowns: list[Any] = []
        """Armed slow_rank effects, closed with the component."""
        self._async_saves = False
        # Storage faults fire now: the session builds components before the trainer loads its checkpoint.
        for fault in self._of_type("checkpoint_corrupt"):
            victim = corrupt_newest(Path(checkpoint_dir), fault.options["mode"]) if checkpoint_dir else None
            self._emit(fault, None, f"{fault.options['mode']} {victim}")

    @classmethod
    def from_plan_file(cls, path: str, events: EventLog, checkpoint_dir: str | None = None) -> FaultInjector:
        return cls(read_plan(path), events, checkpoint_dir)

    def on_loss(self, iteration: int, computation: int, loss: torch.Tensor) -> torch.Tensor:
        return self._loss_faults.corrupt(iteration, computation, loss)

    def _of_type(self, kind: str) -> list[PlannedFault]:
        return [f for f in self.faults if f.type == kind]

    def _emit(self, fault: PlannedFault, iteration: int | None, detail: str) -> None:
        self.events.write(FaultInjected(fault.type, fault.fault_id, detail, iteration, target_rank=self.events.rank))

    def _kill(self, fault: PlannedFault, iteration: int | None, detail: str) -> None:
        self._emit(fault, iteration, detail)
        os.kill(os.getpid(), signal.SIGKILL)

    def on_train_start(self, trainer: Trainer, start_iteration: int) -> None:
        self._async_saves = trainer.cfg.checkpoint.async_save
        for fault in self.faults:
            if fault.delay_s is not None:
                threading.Thread(target=self._fire_later, args=(fault, trainer), daemon=True).start()
        if self._of_type("collective_hang"):
            # Every gradient all-reduce of this rank now passes through this hook; the default hook does
            # the same arithmetic as DDP's built-in reducer, so the run's numbers do not change.
            trainer.ddp.register_comm_hook(None, self._allreduce_hook)

    def _fire_later(self, fault: PlannedFault, trainer: Trainer) -> None:
        time.sleep(fault.delay_s)
        fire(self.events, fault.type, trainer.iteration, fault.fault_id, f"after {fault.delay_s:.2f}s")

    def before_step(self, trainer: Trainer, iteration: int) -> None:
        self._step = iteration
        for fault in self.faults:
            if fault.at_step == iteration and fault.type in ("rank_killed", "rank_hung"):
                fire(self.events, fault.type, iteration, fault.fault_id, f"at step {iteration}")
            elif fault.at_step == iteration and fault.type == "exception":
                self._emit(fault, iteration, fault.options["message"])
                raise InjectedFault(f"{fault.options['message']} (rank {self.events.rank}, step {iteration})")
            elif fault.at_step == iteration and fault.type == "slow_rank":
                self._slow_down(fault, trainer, iteration)
            elif fault.type == "fault_during_checkpoint" and self._async_saves and fault.at_step == iteration - 1:
                self._kill_if_async_save_in_flight(fault, trainer)

    def _slow_down(self, fault: PlannedFault, trainer: Trainer, iteration: int) -> None:
        from chaos.hooks.slow_rank import Slowdown, slow_down

        amount = Slowdown(fault.options.get("factor"), fault.options.get("seconds"))
        self._emit(fault, iteration, f"from step {iteration}: {fault.options}")
        self._slowdowns.append(slow_down(trainer.model, trainer.env.device, amount, trainer.sampler.num_microbatches))

    def close(self, trainer: Trainer | None) -> None:
        for slowdown in self._slowdowns:
            slowdown.close()
        self._slowdowns.clear()

    def _kill_if_async_save_in_flight(self, fault: PlannedFault, trainer: Trainer) -> None:
        # An async save returns at once; it is in flight until poll() or wait() seals it. The next step
        # starts microseconds after the save was issued, long before its writes (~0.1 s) finish.
        pending = trainer.checkpointer.pending_iteration()
        if pending == fault.at_step:
            self._kill(fault, fault.at_step, f"async save of step {pending} in flight")

    def _allreduce_hook(self, state, bucket):  # noqa: ANN001, ANN202 - DDP rejects string annotations here
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        for fault in self._of_type("collective_hang"):
            if fault.at_step == self._step:
                self._emit(fault, self._step, f"inside the gradient all-reduce (bucket {bucket.index()})")
                # The rank stops inside the collective, alive and silent, until its process group is
                # aborted: then it fails as an aborted NCCL collective does. The wait is in Python, so an
                # async raise can unwind it too; on GPU it runs in autograd's device thread, which only
                # the abort (NVRx's in-process restart destroys the group) can reach.
                while dist.is_initialized():
                    time.sleep(0.05)
                raise RuntimeError(f"collective aborted: rank {self.events.rank} hung in the all-reduce of step {self._step}")
        return allreduce_hook(state, bucket)

    def state_dict(self) -> dict[str, Any]:
        # Called by the checkpointer while it writes this rank's state: a sync save of `_step` is in flight.
        for fault in self._of_type("fault_during_checkpoint"):
            if fault.options["during"] == "save" and not self._async_saves and fault.at_step == self._step:
                self._kill(fault, self._step, f"inside the save of step {self._step}")
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # Called by the checkpointer after the sharded state is read, before this rank's own state is applied.
        for fault in self._of_type("fault_during_checkpoint"):
            if fault.options["during"] == "load":
                self._kill(fault, None, "inside the checkpoint load")
