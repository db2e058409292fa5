"""One process's training session: process group, event log, components, trainer, and a clean exit."""

from __future__ import annotations

import gc
import sys
import traceback
from dataclasses import dataclass

import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException

from runlog.log import EventLog
from runlog.records import Exit, ExitOnError, RunStart
from trainer import flight_recorder
from trainer.checkpoint import CheckpointError, SaveFailed
from trainer.components import Component
from trainer.config import TrainerConfig
from trainer.config_base import ConfigError
from trainer.distributed import DistEnv, init_distributed
from trainer.loop import Trainer, versions
from trainer.plugins import load_component
from trainer.resiliency.ft import FaultTolerance
from trainer.resiliency.preemption import Preemption
from trainer.resiliency.rerun import RerunExit
from trainer.resiliency.rerun_step import RerunStateMachine


@dataclass(frozen=True)
class InProcessIteration:
    """What one iteration of NVRx's in-process Wrapper hands the training session (trainer/resiliency/
    inprocess.py): its store, and its attempt (the Wrapper's iteration numbered on from the attempts of
    earlier launcher rounds, see ``inprocess.attempt_base``)."""

    store: dist.Store
    attempt: int


def build_components(cfg: TrainerConfig, env: DistEnv, events: EventLog) -> list[Component]:
    """The resiliency components this config arms; a disabled feature adds nothing."""
    components: list[Component] = []
    if cfg.ft.enable_ft_package or cfg.ft.simulate_fault:
        components.append(FaultTolerance(cfg.ft, events, env.world_size, cfg.rng.seed, cfg.checkpoint.save))
    if cfg.train.exit_signal_handler:
        components.append(Preemption(cfg.train.exit_signal, events))
    if RerunStateMachine.armed(cfg.rerun_state_machine):
        components.append(RerunStateMachine(cfg.rerun_state_machine, env, events, cfg.rng.seed))
    if cfg.nvrx_straggler.enabled:
        from trainer.resiliency.straggler import StragglerDetection

        components.append(StragglerDetection(cfg.nvrx_straggler, events))
    if cfg.fault_injection.component is not None:
        components.append(load_component(cfg.fault_injection.component)(cfg.fault_injection.plan, events))
    return components


class TrainingSession:
    def __init__(self, cfg: TrainerConfig, inprocess: InProcessIteration | None = None):
        """``inprocess``: this session is one iteration of NVRx's in-process Wrapper: its process group
        rendezvous on the iteration's store, its events carry the iteration's attempt, and errors
        propagate to the Wrapper (which restarts the function) instead of ending the process."""
        self.cfg, self.inprocess = cfg, inprocess
        self.env = init_distributed(cfg.dist, None if inprocess is None else inprocess.store)
        attempt = None if inprocess is None else inprocess.attempt
        self.events = EventLog(cfg.logger.run_dir, f"rank-{self.env.rank}", self.env.rank, attempt)
        self.events.write(RunStart(
            cfg.digest(), self.env.world_size, self.env.backend, str(self.env.device), self.env.launcher,
            cfg.train.train_iters, versions(),
        ))
        self.components: list[Component] = []
        self.trainer: Trainer | None = None

    def __enter__(self) -> TrainingSession:
        return self

    def run(self) -> int:
        try:
            self.components = build_components(self.cfg, self.env, self.events)
            rerun = next((c for c in self.components if isinstance(c, RerunStateMachine)), None)
            self.trainer = Trainer(self.cfg, self.env, self.events, self.components, step_runner=rerun)
            reason = self.trainer.train()
        except (ConfigError, CheckpointError) as e:  # bad input: a config, a checkpoint to load
            print(f"trainer: error: {e}", file=sys.stderr)
            self.events.write(ExitOnError("error", 2, self._iteration(), str(e)))
            return 2
        except SaveFailed as e:  # checkpoint.on_save_failure: exit
            if self.inprocess is not None:
                raise
            print(f"trainer: {e}", file=sys.stderr)
            self.events.write(ExitOnError("checkpoint_failed", 1, self._iteration(), str(e)))
            return 1
        except RerunExit as e:
            print(f"trainer: rerun state machine: exit {e.code} ({e.diagnosis}): {e}", file=sys.stderr)
            self.events.write(ExitOnError("rerun", e.code, self._iteration(), str(e), diagnosis=e.diagnosis))
            return e.code
        except (Exception, CheckpointException) as e:  # DCP's CheckpointException is a BaseException
            if self.inprocess is not None:
                raise
            traceback.print_exc()
            flight_recorder.dump_on_error(self.env.rank)
            self.events.write(ExitOnError("error", 1, self._iteration(), f"{type(e).__name__}: {e}"))
            return 1
        digest = self.trainer.save_final_weights() if reason == "completed" else None
        self.events.write(Exit(reason, 0, self.trainer.iteration, digest))
        return 0

    def _iteration(self) -> int | None:
        return self.trainer.iteration if self.trainer else None

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if self.trainer is not None:
            self.trainer.close()
        for c in self.components:
            c.close()
        self.events.close()
        # Free the trainer while its process group is alive, so that nothing it holds is destroyed after
        # the group (torch DDP's reducer, which it used to hold, deadlocked there).
        self.trainer = None
        gc.collect()
        if dist.is_initialized() and not self._abort_is_nvrx_job(exc_type):
            dist.destroy_process_group()

    def _abort_is_nvrx_job(self, exc_type: type[BaseException] | None) -> bool:
        """A failed in-process iteration on NCCL leaves its group to NVRx's abort (AbortTorchDistributed):
        a graceful NCCL destroy waits on peers still inside a collective with this rank (seen: 32 s, past
        the Wrapper's timeouts). On gloo the graceful destroy is what frees them (their sockets close)."""
        return exc_type is not None and self.inprocess is not None and self.env.backend == "nccl"
