"""The rerun state machine as a trainer component: it runs each step's forward/backward through the
machine of trainer/resiliency/rerun.py, gathers every rank's report, reruns in place with the RNG and data
position the step started from, and saves and exits (16/17) when the machine says so."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import torch
import torch.distributed as dist

from runlog import pitfalls
from runlog.env import node_id
from runlog.log import EventLog
from runlog.records import Pitfall, Rerun
from trainer.components import Component
from trainer.config_resiliency import RerunStateMachineConfig
from trainer.distributed import DistEnv
from trainer.resiliency.rerun import (
    Action,
    Diagnosis,
    Report,
    RerunExit,
    ResultValidationError,
    Vote,
    machine_from_config,
)
from trainer.rng import rng_state, set_rng_state

log = logging.getLogger(__name__)


class StepHost(Protocol):
    """What the state machine needs of the training loop around one step."""

    iteration: int
    """The last completed step."""

    def data_state(self) -> dict[str, int]: ...
    def restore_data(self, state: dict[str, int]) -> None: ...

    def save_checkpoint(self) -> bool:
        """Save a checkpoint of ``iteration`` now; False when the trainer saves none (checkpoint.save unset)."""

    def wait_for_saves(self) -> None: ...


def gather_reports(report: Report, env: DistEnv) -> list[Report]:
    """Every rank's report, on every rank: one all-reduce (SUM of rows that only their owner fills)."""
    rows = torch.zeros((env.world_size, 2), dtype=torch.float64, device=env.device)
    rows[env.rank, 0], rows[env.rank, 1] = float(report.vote), report.value
    dist.all_reduce(rows)
    return [Report(Vote(int(v)), float(x)) for v, x in rows.tolist()]


class RerunStateMachine(Component):
    """Runs the step's forward/backward through the state machine: validate, rerun, save and exit."""

    name = "rerun_state_machine"

    def __init__(self, cfg: RerunStateMachineConfig, env: DistEnv, events: EventLog, seed: int):
        self.env, self.events = env, events
        here = f"{node_id()}/{env.device.type}:{env.local_rank}"
        self.machine = machine_from_config(cfg, env.rank, env.world_size, here, seed)
        log.warning("RerunStateMachine initialized in mode %s", self.machine.mode.value)

    @staticmethod
    def armed(cfg: RerunStateMachineConfig) -> bool:
        """Megatron checks NaN losses even with reruns disabled; nothing to do when no check is on."""
        return cfg.rerun_mode != "disabled" or cfg.check_for_nan_in_loss or cfg.check_for_spiky_loss

    def run_step(self, host: StepHost, step: int, compute: Callable[[int], torch.Tensor]) -> torch.Tensor:
        """The step's local loss once the machine lets the optimizer step; raises to stop the run."""
        m = self.machine
        m.start_step(step)
        rng, data = rng_state(), host.data_state()
        computation = 0
        while True:
            loss = compute(computation)
            action = m.decide(gather_reports(m.record(loss.item()), self.env))
            if action.noteworthy:
                self._emit(action, step)
            if action.kind == "proceed":
                return loss
            set_rng_state(rng)  # rerun (or save) from exactly the state the step started from
            host.restore_data(data)
            if action.kind != "rerun":
                self._stop(host, action, step)
            computation += 1

    def _emit(self, action: Action, step: int) -> None:
        m = self.machine
        self.events.write(Rerun(
            action.state.value, action.diagnosis.value if action.diagnosis else None, step, list(action.flagged),
            list(action.values), m.failed_check, m.initial_value, action.code, action.message,
        ))
        level = logging.INFO if action.kind == "proceed" and not action.flagged else logging.WARNING
        if self.env.rank == 0:
            log.log(level, "rerun state machine, iteration %d: %s -> %s", step, action.message, action.state.value)

    def _stop(self, host: StepHost, action: Action, step: int) -> None:
        if action.kind == "error":
            raise ResultValidationError(action.message)
        if action.save and not host.save_checkpoint():
            log.error("exit %d asks for a checkpoint but checkpoint.save is unset: nothing to resume from", action.code)
        host.wait_for_saves()
        if action.diagnosis is Diagnosis.SAME_NODE_LOOP:
            self.events.write(Pitfall(pitfalls.RERUN_SAME_NODE_LOOP, f"iteration {step}: {action.message}"))
        raise RerunExit(action.code, action.diagnosis.value, f"iteration {step}: {action.message}")

    def state_dict(self) -> dict[str, Any]:
        return self.machine.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.machine.load_state_dict(state)
