"""The scenarios the benchmark runs, built in code as the data a scenario file would hold.

Every point is a plain mapping checked by ``chaos.schema.loader.parse_scenario``, so a benchmark point obeys
the same rules as a catalogue scenario. Points that measure the same thing in two sections are the same
mapping (the ft_launcher kill with checkpoints every 5 steps is both recovery (a) and lost work at 5),
and the runner measures each distinct mapping once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

Data = dict[str, Any]

PROJECT_ROOT = Path(__file__).resolve().parent.parent
KILL_STEP = 10
"""Faults of the recovery and lost-work points fire before this step: late enough for two checkpoints
at interval 5, early enough that the 12-step run still has steps left after the restart."""
RECOVERY_ITERS = 12
HANG_STEP = 5
HANG_ITERS = 8
OVERHEAD_ITERS = 60


def scenario(name: str, world: int = 2, launcher: str = "ft_launcher", iters: int = RECOVERY_ITERS, **fields: Any) -> Data:
    trainer = {"train.train_iters": iters, "ft.enable_ft_package": launcher == "ft_launcher", **fields.pop("trainer", {})}
    return {"schema_version": 1, "name": name, "description": "benchmark point", "world_size": world,
            "launcher": launcher, "trainer": trainer, **fields}


def hang(mode: str, timeout: float, interval: float, world: int = 2) -> Data:
    """A rank stops (SIGSTOP) mid-run; no restart is allowed, so the run ends soon after the detection."""
    if mode == "heartbeat":
        trainer: Data = {}
        ft: Data = {"initial_rank_heartbeat_timeout": 60, "rank_heartbeat_timeout": timeout}
    else:
        trainer = {"ft.use_sections": True}
        ft = {"initial_rank_heartbeat_timeout": None, "rank_heartbeat_timeout": None,
              "rank_section_timeouts": {"setup": 60, "step": timeout, "checkpointing": 30},
              "rank_out_of_section_timeout": 10}
    return scenario(
        f"hang-{mode}-t{timeout:g}-i{interval:g}-w{world}", world, iters=HANG_ITERS, trainer=trainer,
        ft={**ft, "workload_check_interval": interval}, max_restarts=0, deadline_s=90,
        faults=[{"type": "rank_hung", "rank": world - 1, "at_step": HANG_STEP}],
    )


def kill(launcher: str = "ft_launcher", save_interval: int = 5, async_save: bool = False, world: int = 2) -> Data:
    """A rank is SIGKILLed before step 10; the launcher restarts the group from the newest checkpoint."""
    mode = "async" if async_save else "sync"
    return scenario(
        f"kill-{launcher}-ckpt{save_interval}-{mode}-w{world}", world, launcher,
        trainer={"checkpoint.save_interval": save_interval, "checkpoint.async_save": async_save},
        faults=[{"type": "rank_killed", "rank": world - 1, "at_step": KILL_STEP}],
    )


def exception(inprocess: bool) -> Data:
    """An exception on rank 1 before step 10: under NVRx's in-process Wrapper (the settings of
    scenarios/inprocess_exception.yaml) or under ft_launcher, which respawns the workers."""
    fault = {"type": "exception", "rank": 1, "at_step": KILL_STEP}
    if not inprocess:
        return scenario("exception-ft_launcher", trainer={"checkpoint.save_interval": 5}, faults=[fault])
    data = yaml.safe_load((PROJECT_ROOT / "scenarios" / "inprocess_exception.yaml").read_text())
    trainer = {**data["trainer"], "train.train_iters": RECOVERY_ITERS, "checkpoint.save_interval": 5}
    data.pop("expect", None)
    data.pop("known_failure", None)  # it names expectations, and the point judges none
    return {**data, "name": "exception-inprocess", "trainer": trainer, "faults": [fault]}


def steady(kind: str) -> Data:
    """A fault-free run for step times: plain torchrun, torchrun with an armed chaos plan whose fault
    never fires (it belongs to restart round 3, which never comes), torchrun with PyTorch's Flight
    Recorder recording every collective, or ft_launcher with heartbeats."""
    if kind == "nvrx":
        return scenario("steady-nvrx", iters=OVERHEAD_ITERS)
    if kind == "flight_recorder":
        return scenario("steady-flight_recorder", launcher="torchrun", iters=OVERHEAD_ITERS, flight_recorder=True)
    faults = [{"type": "rank_killed", "rank": 1, "at_step": 5, "attempt": 3}] if kind == "armed" else []
    return scenario(f"steady-{kind}", launcher="torchrun", iters=OVERHEAD_ITERS, faults=faults)
