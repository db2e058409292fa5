"""The chaos component inside the trainer: hands every trainer hook to this rank's planned faults.

Loaded by the trainer only when its config names this component (``fault_injection.component``) and a plan
(``fault_injection.plan``): a run that is not armed never imports this module. It sees the trainer through
its Component hooks alone, and reads the plan without the scenario schema. The faults are its rank's kinds
of chaos/faults (chaos/faults/in_rank_kinds.py); signal, node and Slurm faults are the supervisor's.

The supervisor's faults with an ``at_step`` are exact too: every rank waits after that step (its ``step``
event written) until the supervisor has struck the fault or given it up (``RunFolder.struck``), as torchft
holds a replica at a (rank, step) seam. The supervisor learns the step from the events and finds its targets
in /proc; on a loaded machine that took over a second, in which a fast run went on past the checkpoint the
scenario's window ended at, or to its end. The wait is bounded by ``HOLD_S``, below the heartbeat timeouts a
scenario sets, so the monitor never mistakes it for a hang: past it the rank goes on, as without the wait.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaos.faults.in_rank import RankFault, Slowdown
from chaos.faults.in_rank_kinds import RANK_FAULTS
from chaos.faults.plan import PlannedFault, others, read_plan
from runlog.layout import RunFolder
from runlog.log import EventLog
from runlog.records import FaultInjected, FaultMissed
from trainer.components import CheckpointCandidate, Component, LoadPhase, SavePhase, TrainContext

if TYPE_CHECKING:
    import torch

HOLD_S = 2.0
"""The longest a rank waits at a supervisor fault's step: the runner strikes in 0.1-1.3 s (quiet to loaded
2-core machine), and NVRx's heartbeat timeouts in the catalogue are 3 s and more."""
POLL_S = 0.005


class FaultInjector(Component):
    """This rank's faults of this attempt, fired from the trainer's hooks (the `Rank` they act through)."""

    name = "chaos"

    def __init__(self, plan: str | Path, events: EventLog):
        """The trainer's factory call (trainer/plugins.py): `plan` is the run's plan file."""
        self.events, self.rank, self.node = events, events.rank, events.node
        self.faults: list[RankFault] = [
            f for f in read_plan(plan, RANK_FAULTS) if f.rank == events.rank and f.fires_in(events.attempt)
        ]
        self.awaited = [f for f in others(plan, RANK_FAULTS) if f.at_step is not None and f.attempt == events.attempt]
        """The supervisor's step-triggered faults of this attempt, which every rank waits at."""
        self.folder = RunFolder(Path(plan).parent)
        self.ctx: TrainContext | None = None
        self.in_flight: set[int] = set()
        self._iteration = 0
        """The last completed step (what a delayed fault's event names)."""
        self._slowdowns: list[Slowdown] = []
        self._seen: set[tuple[Any, ...]] = set()

    # ------------------------------------------------------------------------- what the faults act through
    def announce(self, fault: PlannedFault, iteration: int | None, detail: str) -> None:
        self.events.write(FaultInjected(fault.type, fault.fault_id, detail, iteration, target_rank=self.rank))

    def miss(self, fault: PlannedFault, reason: str) -> None:
        self.events.write(FaultMissed(fault.type, fault.fault_id, reason, target_rank=self.rank))

    def kill(self, fault: PlannedFault, iteration: int | None, detail: str, sig: signal.Signals = signal.SIGKILL) -> None:
        self.announce(fault, iteration, detail)
        os.kill(os.getpid(), sig)

    def arm(self, slowdown: Slowdown) -> None:
        self._slowdowns.append(slowdown)

    def first_time(self, key: tuple[Any, ...]) -> bool:
        seen = key in self._seen
        self._seen.add(key)
        return not seen

    # ------------------------------------------------------------------------- the trainer's hooks
    def on_load(self, phase: LoadPhase, checkpoints: Sequence[CheckpointCandidate]) -> None:
        for fault in self.faults:
            fault.on_load(self, phase, checkpoints)

    def on_train_start(self, ctx: TrainContext, start_iteration: int) -> None:
        self.ctx, self._iteration = ctx, start_iteration
        for fault in self.faults:
            if fault.delay_s is not None:
                threading.Thread(target=self._fire_later, args=(fault,), daemon=True).start()

    def _fire_later(self, fault: RankFault) -> None:
        time.sleep(fault.delay_s)
        fault.after_delay(self, self._iteration)

    def before_step(self, iteration: int) -> None:
        for fault in self.faults:
            fault.before_step(self, iteration)

    def before_forward(self, iteration: int, microbatch: int) -> None:
        for slowdown in self._slowdowns:
            slowdown.start()

    def after_forward(self, iteration: int, microbatch: int) -> None:
        for slowdown in self._slowdowns:
            slowdown.stop()

    def on_loss(self, iteration: int, computation: int, loss: torch.Tensor) -> torch.Tensor:
        for fault in self.faults:
            loss = fault.on_loss(self, iteration, computation, loss)
        return loss

    def after_step(self, iteration: int, loss: float) -> None:
        self._iteration = iteration
        due = [f for f in self.awaited if f.at_step <= iteration]
        if due:
            self.awaited = [f for f in self.awaited if f.at_step > iteration]
            self._wait_for_strikes(due)

    def _wait_for_strikes(self, faults: list[PlannedFault]) -> None:
        """Until the supervisor has struck (or given up) each of `faults`, at most HOLD_S. A signal that comes
        meanwhile is handled here, so the stop vote right after this hook sees it."""
        deadline = time.monotonic() + HOLD_S
        marks = [self.folder.struck(f.fault_id) for f in faults]
        while not all(m.exists() for m in marks) and time.monotonic() < deadline:
            time.sleep(POLL_S)

    def on_save(self, phase: SavePhase, iteration: int) -> None:
        if phase is SavePhase.ISSUED and self.ctx is not None and self.ctx.async_saves:
            self.in_flight.add(iteration)
        elif phase is SavePhase.SEALED:
            self.in_flight.discard(iteration)
        for fault in self.faults:
            fault.on_save(self, phase, iteration)

    def on_local_save(self, phase: SavePhase, iteration: int) -> None:
        for fault in self.faults:
            fault.on_local_save(self, phase, iteration)

    def on_local_load(self, folder: Path) -> None:
        for fault in self.faults:
            fault.on_local_load(self, folder)

    def before_grad_reduce(self, iteration: int, bucket: int) -> None:
        for fault in self.faults:
            fault.in_allreduce(self, iteration, bucket)

    def close(self) -> None:
        for slowdown in self._slowdowns:
            slowdown.close()
        self._slowdowns.clear()
