"""One process's training session: process group, event log, components, trainer, and a clean exit."""

from __future__ import annotations

import gc
import sys
import traceback

import torch.distributed as dist

from trainer.components import Component
from trainer.config import ConfigError, TrainerConfig
from trainer.distributed import DistEnv, init_distributed
from trainer.events import EventLog
from trainer.loop import Trainer, versions
from trainer.resiliency.ft import FaultTolerance


def build_components(cfg: TrainerConfig, env: DistEnv, events: EventLog) -> list[Component]:
    """The resiliency components this config arms; a disabled feature adds nothing."""
    components: list[Component] = []
    if cfg.ft.enable_ft_package or cfg.ft.simulate_fault:
        components.append(FaultTolerance(cfg.ft, events, env.world_size, cfg.rng.seed))
    if cfg.fault_injection.plan:
        from chaos.injector import FaultInjector

        components.append(FaultInjector.from_plan_file(cfg.fault_injection.plan, events))
    return components


class TrainingSession:
    def __init__(self, cfg: TrainerConfig):
        self.cfg = cfg
        self.env = init_distributed(cfg.dist)
        self.events = EventLog(cfg.logger.run_dir, f"rank-{self.env.rank}", self.env.rank)
        self.events.emit(
            "run_start", config_digest=cfg.digest(), world_size=self.env.world_size, backend=self.env.backend,
            device=str(self.env.device), launcher=self.env.launcher, train_iters=cfg.train.train_iters,
            versions=versions(),
        )
        self.components: list[Component] = []
        self.trainer: Trainer | None = None

    def __enter__(self) -> TrainingSession:
        return self

    def run(self) -> int:
        try:
            self.components = build_components(self.cfg, self.env, self.events)
            self.trainer = Trainer(self.cfg, self.env, self.events, self.components)
            reason = self.trainer.train()
        except ConfigError as e:
            print(f"trainer: error: {e}", file=sys.stderr)
            self.events.emit("exit", reason="error", code=2, iteration=self._iteration(), error=str(e))
            return 2
        except Exception as e:
            traceback.print_exc()
            self.events.emit("exit", reason="error", code=1, iteration=self._iteration(), error=f"{type(e).__name__}: {e}")
            return 1
        digest = self.trainer.save_final_weights() if reason == "completed" else None
        self.events.emit("exit", reason=reason, code=0, iteration=self.trainer.iteration, weights_digest=digest)
        return 0

    def _iteration(self) -> int | None:
        return self.trainer.iteration if self.trainer else None

    def __exit__(self, *exc: object) -> None:
        for c in self.components:
            c.close(self.trainer)
        self.events.close()
        # Free DDP's reducer while its process group is alive: destroying the group first leaves the
        # reducer's destructor joining a gloo thread that waits for the GIL it holds (a teardown deadlock).
        self.trainer = None
        gc.collect()
        if dist.is_initialized():
            dist.destroy_process_group()
