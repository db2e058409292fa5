"""NVRx fault tolerance: heartbeats or sections to ft_launcher's rank monitor, and Bridge's simulate_fault.

Under ft_launcher with ``ft.enable_ft_package=true`` the trainer reports to NVRx's RankMonitorClient:
a heartbeat after every step (default), or the sections "setup", "step" and "checkpointing"
(``ft.use_sections=true``), so the launcher's monitor can tell a hung rank from a slow one.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import threading
import time
from pathlib import Path

from runlog import pitfalls
from runlog.log import EventLog
from runlog.records import FaultInjected, FtTimeouts, Pitfall
from trainer.checkpoint import atomic_write_text
from trainer.components import Component, TrainContext
from trainer.config_resiliency import FaultToleranceConfig

log = logging.getLogger(__name__)

FT_STATE = "ft_state.json"

FAULT_SIGNALS = {"rank_hung": signal.SIGSTOP, "rank_killed": signal.SIGKILL}


def fire(events: EventLog, fault: str, iteration: int | None, fault_id: str, detail: str = "") -> None:
    """Log the fault (flushed first, so the event survives it), then stop or kill this process."""
    events.write(FaultInjected(fault, fault_id, detail, iteration, target_rank=events.rank))
    print(f"FT: Simulating fault: {fault}; rank to fail: {events.rank}", flush=True)
    os.kill(os.getpid(), FAULT_SIGNALS[fault])


def simulated_fault_plan(cfg: FaultToleranceConfig, world_size: int, seed: int) -> tuple[int, str, float]:
    """(rank, fault type, delay) as Megatron Bridge draws them, from a seed every rank shares.

    Bridge broadcasts the chosen rank as a CUDA tensor; drawing from the same seed on every rank gives
    the same answer with no communication, on gloo as on NCCL.
    """
    rng = random.Random(seed)
    rank = cfg.simulated_fault_rank if cfg.simulated_fault_rank is not None else rng.randrange(world_size)
    fault = cfg.simulated_fault_type
    if fault == "random":
        fault = rng.choice(["rank_hung", "rank_killed"])
    delay = cfg.simulated_fault_base_delay + 0.2 * rng.random() * cfg.simulated_fault_base_delay
    return rank, fault, delay


class FaultTolerance(Component):
    """Reports progress to ft_launcher's rank monitor; optionally simulates a fault (Bridge's config)."""

    name = "ft"

    def __init__(
        self, cfg: FaultToleranceConfig, events: EventLog, world_size: int, seed: int, state_dir: str | None = None
    ):
        self.cfg = cfg
        self.events = events
        self.world_size = world_size
        self.seed = seed
        # Learned timeouts live beside the checkpoints, as Bridge keeps them (ft_state.json).
        self.state_file = Path(state_dir) / FT_STATE if state_dir else None
        self.client = None
        self._in_setup = False
        self._iteration = 0
        """The last completed step (what a simulated fault's event names)."""
        if cfg.enable_ft_package:
            self._connect()

    def _connect(self) -> None:
        if "FT_RANK_MONITOR_IPC_SOCKET" not in os.environ:
            log.warning("ft.enable_ft_package=true but this process was not started by ft_launcher: no monitoring")
            self.events.write(Pitfall(pitfalls.FT_WITHOUT_FT_LAUNCHER, "no FT_RANK_MONITOR_IPC_SOCKET in the environment"))
            return
        from trainer import nvrx_compat

        self.client = nvrx_compat.rank_monitor_client()
        if self.cfg.calc_ft_timeouts and self.state_file is not None and self.state_file.is_file():
            # Before init: the client hands loaded timeouts to its rank monitor when it connects.
            self.client.load_state_dict(json.loads(self.state_file.read_text()))
        nvrx_compat.init_workload_monitoring(self.client)
        self._report_timeouts()
        if self.cfg.use_sections:
            self.client.start_section("setup")
            self._in_setup = True

    def on_train_start(self, ctx: TrainContext, start_iteration: int) -> None:
        self._iteration = start_iteration
        if self.client is not None and not self.cfg.use_sections:
            self.client.send_heartbeat()
        if self.cfg.simulate_fault and self.events.attempt == 0:
            self._start_simulated_fault()

    def _start_simulated_fault(self) -> None:
        # Bridge's thread fires on every launch; firing in the first attempt only lets the recovery show.
        rank, fault, delay = simulated_fault_plan(self.cfg, self.world_size, self.seed)
        if rank != self.events.rank:
            return

        def _later() -> None:
            time.sleep(delay)
            fire(self.events, fault, self._iteration, "ft.simulate_fault", f"base_delay={self.cfg.simulated_fault_base_delay}")

        threading.Thread(target=_later, name="ft-simulated-fault", daemon=True).start()

    def section_start(self, name: str) -> None:
        if self.client is None or not self.cfg.use_sections:
            return
        if self._in_setup:  # setup (imports, rendezvous, resume) ends where the first section begins
            self.client.end_section("setup")
            self._in_setup = False
        self.client.start_section(name)

    def section_end(self, name: str) -> None:
        if self.client is None:
            return
        if self.cfg.use_sections:
            self.client.end_section(name)
        if name == "checkpointing" and self.cfg.calc_ft_timeouts:
            self._learn_timeouts()

    def _learn_timeouts(self) -> None:
        """Timeouts from the intervals observed so far (NVRx: safety factor x the longest), persisted.

        Called on every rank at the same point (NVRx synchronizes the observations across ranks).
        """
        if self.cfg.use_sections:
            learned = self.client.calculate_and_set_section_timeouts(skip_if_not_ready=True)
        else:
            learned = self.client.calculate_and_set_hb_timeouts(skip_if_not_ready=True)
        if not learned:
            return
        if self.events.rank == 0 and self.state_file is not None:
            atomic_write_text(self.state_file, json.dumps(self.client.state_dict()))
        self._report_timeouts()

    def _report_timeouts(self) -> None:
        hb, sections = self.client.hb_timeouts, self.client.section_timeouts
        self.events.write(FtTimeouts(
            heartbeat={"initial": hb.initial, "subsequent": hb.subsequent},
            sections={**sections.section, "out_of_section": sections.out_of_section},
            calculated=bool(hb.were_calculated or sections.calculated_sections or sections.is_out_of_section_calculated),
        ))

    def after_step(self, iteration: int, loss: float) -> None:
        self._iteration = iteration
        if self.client is not None and not self.cfg.use_sections:
            self.client.send_heartbeat()

    def close(self) -> None:
        if self.client is not None:
            if self.cfg.use_sections:
                self.client.end_all_sections()
            self.client.shutdown_workload_monitoring()
            self.client = None
