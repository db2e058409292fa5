"""The chaos hook inside the trainer: fires this rank's planned faults at a step, after a delay, inside a
gradient all-reduce, inside a checkpoint save or load, or on the checkpoint folder before a restart loads it.

Loaded by the trainer only when its config names this component (``fault_injection.component``) and a plan
(``fault_injection.plan``): a run that is not armed never imports this module. It sees the trainer through
its Component hooks alone. Signal faults (sigterm, sigkill, ...) are not fired here: the runner sends them
from outside (chaos.supervise.signals).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from chaos.hooks.loss import LossFaults, is_persistent
from chaos.hooks.storage import corrupt_newest
from chaos.schema.faults import LOSS_FAULTS, SIGNAL_FAULTS
from chaos.schema.plan import PlannedFault, read_plan
from runlog.log import EventLog
from runlog.records import FaultInjected
from trainer.components import CheckpointCandidate, CommHook, Component, LoadPhase, SavePhase, TrainContext

if TYPE_CHECKING:
    import torch

FAULT_SIGNALS = {"rank_hung": signal.SIGSTOP, "rank_killed": signal.SIGKILL}


class InjectedFault(RuntimeError):
    """The exception an `exception` fault raises inside the step."""


class FaultInjector(Component):
    name = "chaos"

    def __init__(self, plan: str | Path, events: EventLog):
        """This rank's faults of `plan` (a plan file, chaos/schema/plan.py); the trainer's factory call."""
        self.events = events
        faults = read_plan(plan)
        # Only this rank's faults of this restart round; signal faults come from the runner.
        self.faults = [
            f for f in faults
            if f.rank == events.rank and (f.attempt == events.attempt or is_persistent(f)) and f.type not in SIGNAL_FAULTS
        ]
        self._loss_faults = LossFaults([f for f in self.faults if f.type in LOSS_FAULTS], self._emit)
        self._step = 0
        self._iteration = 0
        """The last completed step (what a delayed fault's event names)."""
        self._ctx: TrainContext | None = None
        self._slowdowns: list[Any] = []
        """Armed slow_rank effects, closed with the component."""
        self._in_flight: set[int] = set()
        """Iterations of this rank's async saves issued and not yet sealed."""

    def _of_type(self, kind: str) -> list[PlannedFault]:
        return [f for f in self.faults if f.type == kind]

    def _emit(self, fault: PlannedFault, iteration: int | None, detail: str) -> None:
        self.events.write(FaultInjected(fault.type, fault.fault_id, detail, iteration, target_rank=self.events.rank))

    def _kill(self, fault: PlannedFault, iteration: int | None, detail: str) -> None:
        self._emit(fault, iteration, detail)
        os.kill(os.getpid(), signal.SIGKILL)

    def _fire(self, fault: PlannedFault, iteration: int | None, detail: str) -> None:
        """rank_killed / rank_hung: logged (and flushed) first, so the event survives the fault."""
        self._emit(fault, iteration, detail)
        print(f"FT: Simulating fault: {fault.type}; rank to fail: {self.events.rank}", flush=True)
        os.kill(os.getpid(), FAULT_SIGNALS[fault.type])

    # ------------------------------------------------------------------------------------ checkpoints
    def on_load(self, phase: LoadPhase, checkpoints: Sequence[CheckpointCandidate]) -> None:
        if phase is LoadPhase.CHOOSE:
            for fault in self._of_type("checkpoint_corrupt"):
                victim = corrupt_newest(checkpoints, fault.options["mode"])
                self._emit(fault, None, f"{fault.options['mode']} {victim}")
        for fault in self._of_type("fault_during_checkpoint"):
            if phase is LoadPhase.READ and fault.options["during"] == "load":
                self._kill(fault, None, "inside the checkpoint load")

    def on_save(self, phase: SavePhase, iteration: int) -> None:
        assert self._ctx is not None
        if phase is SavePhase.ISSUED and self._ctx.async_saves:
            self._in_flight.add(iteration)
        elif phase is SavePhase.SEALED:
            self._in_flight.discard(iteration)
        for fault in self._of_type("fault_during_checkpoint"):
            inside = phase is SavePhase.BEGIN and not self._ctx.async_saves and fault.options["during"] == "save"
            if inside and fault.at_step == iteration:
                self._kill(fault, iteration, f"inside the save of step {iteration}")

    # ------------------------------------------------------------------------------------ steps
    def on_train_start(self, ctx: TrainContext, start_iteration: int) -> None:
        self._ctx, self._iteration = ctx, start_iteration
        for fault in self.faults:
            if fault.delay_s is not None:
                threading.Thread(target=self._fire_later, args=(fault,), daemon=True).start()

    def _fire_later(self, fault: PlannedFault) -> None:
        time.sleep(fault.delay_s)
        self._fire(fault, self._iteration, f"after {fault.delay_s:.2f}s")

    def before_step(self, iteration: int) -> None:
        self._step = iteration
        for fault in self.faults:
            if fault.at_step == iteration and fault.type in FAULT_SIGNALS:
                self._fire(fault, iteration, f"at step {iteration}")
            elif fault.at_step == iteration and fault.type == "exception":
                self._emit(fault, iteration, fault.options["message"])
                raise InjectedFault(f"{fault.options['message']} (rank {self.events.rank}, step {iteration})")
            elif fault.at_step == iteration and fault.type == "slow_rank":
                self._slow_down(fault, iteration)
            elif fault.type == "fault_during_checkpoint" and fault.at_step == iteration - 1:
                self._kill_if_async_save_in_flight(fault)

    def after_step(self, iteration: int, loss: float) -> None:
        self._iteration = iteration

    def _slow_down(self, fault: PlannedFault, iteration: int) -> None:
        from chaos.hooks.slow_rank import Slowdown, slow_down

        assert self._ctx is not None
        amount = Slowdown(fault.options.get("factor"), fault.options.get("seconds"))
        self._emit(fault, iteration, f"from step {iteration}: {fault.options}")
        self._slowdowns.append(slow_down(self._ctx.device, amount, self._ctx.microbatches))

    def _kill_if_async_save_in_flight(self, fault: PlannedFault) -> None:
        # An async save returns at once; it is in flight until it is sealed. The next step starts
        # microseconds after the save was issued, long before its writes (~0.1 s) finish.
        if fault.at_step in self._in_flight:
            self._kill(fault, fault.at_step, f"async save of step {fault.at_step} in flight")

    def before_forward(self, iteration: int, microbatch: int) -> None:
        for slowdown in self._slowdowns:
            slowdown.start()

    def after_forward(self, iteration: int, microbatch: int) -> None:
        for slowdown in self._slowdowns:
            slowdown.stop()

    def on_loss(self, iteration: int, computation: int, loss: torch.Tensor) -> torch.Tensor:
        return self._loss_faults.corrupt(iteration, computation, loss)

    # ------------------------------------------------------------------------------------ communication
    def comm_hook(self) -> CommHook | None:
        # Every gradient all-reduce of this rank then passes through the hook; the default hook does the
        # same arithmetic as DDP's built-in reducer, so the run's numbers do not change.
        return self._allreduce_hook if self._of_type("collective_hang") else None

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

    def close(self) -> None:
        for slowdown in self._slowdowns:
            slowdown.close()
        self._slowdowns.clear()
