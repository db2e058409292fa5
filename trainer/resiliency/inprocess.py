"""NVRx in-process restart (``inprocess_restart.*``, Megatron Bridge's names and defaults).

The whole training session (process group, components, trainer, resume from the newest checkpoint) is the
function NVRx's ``inprocess.Wrapper`` wraps. On a fault in any rank, every rank aborts its process group
and re-enters the function in the same process: no respawn, no re-import. As in Bridge, the process group of
iteration i rendezvous on prefix ``i`` of a coordination store on MASTER_PORT+1, and the Wrapper's own store
is on MASTER_PORT+2 (the chaos runner reserves both with the rendezvous port).

What it can recover depends on the backend: NCCL collectives can be aborted; gloo's cannot. On gloo an
exception (or a dead peer) still frees the others, because the failing rank's abort closes its sockets and
their blocked collective errors out; a rank that hangs inside a collective keeps them blocked until the hard
timeout kills the ranks.

No ``from __future__ import annotations`` here: NVRx hands the running CallWrapper to the parameter whose
annotation *is* the CallWrapper class, and a string annotation would not match.
"""

import logging
import os
import socket
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from runlog import pitfalls
from runlog.env import current_attempt, launch_round
from runlog.layout import RunFolder
from runlog.log import EventLog
from runlog.reader import EventTail
from runlog.records import InprocessAbort, InprocessStart, Pitfall
from trainer import nvrx_compat
from trainer.config import TrainerConfig, wants_cuda
from trainer.config_resiliency import InProcessRestartConfig
from trainer.session import InProcessIteration, TrainingSession

log = logging.getLogger(__name__)

inprocess = nvrx_compat.inprocess()
STORE_TIMEOUT = timedelta(seconds=300)


def attempt_base(run_dir: str | None) -> int:
    """The attempt of this process's Wrapper iteration 0. The Wrapper counts iterations from 0 in every
    process, so after a launcher restart (an in-process restart that could not recover) they would repeat
    the attempts of the round before, and a fault armed for attempt 0 would fire again. Each round starts
    after the last attempt the run folder's ``inprocess_start`` events show for earlier rounds (their
    processes are gone before a new round starts, so every rank reads the same; a line that is not an event
    is not the trainer's to judge, and is passed over)."""
    round_ = current_attempt()
    if round_ == 0 or run_dir is None:
        return round_
    earlier = [
        e["attempt"] for e in EventTail(Path(run_dir), "rank-*.jsonl").poll(final=True)
        if e["event"] == "inprocess_start" and e.get("launch_round", 0) < round_
    ]
    return max(round_, 1 + max(earlier, default=-1))


class AbortEvent(inprocess.abort.Abort):
    """Writes ``inprocess_abort`` to the rank's event log the moment NVRx aborts this iteration (detection)."""

    def __init__(self, run_dir: str | None, base: int):
        self.run_dir, self.base = run_dir, base

    def __call__(self, state: inprocess.state.FrozenState) -> inprocess.state.FrozenState:
        attempt = self.base + state.iteration
        events = EventLog(self.run_dir, f"rank-{state.initial_rank}", state.initial_rank, attempt=attempt)
        events.write(InprocessAbort(state.iteration, state.active_rank))
        events.close()
        return state


def timeouts(cfg: InProcessRestartConfig) -> dict[str, timedelta]:
    """The Wrapper's intervals and timeouts (config.py has checked the orderings NVRx asserts)."""
    names = (
        "monitor_thread_interval", "monitor_process_interval", "progress_watchdog_interval", "heartbeat_interval",
        "soft_timeout", "hard_timeout", "heartbeat_timeout", "barrier_timeout", "completion_timeout",
        "last_call_wait", "termination_grace_time",
    )
    return {name: timedelta(seconds=getattr(cfg, name)) for name in names}


def rank_assignment(cfg: InProcessRestartConfig, world_size: int) -> object:
    """Bridge's tree: the whole world in reserve, then (granularity node) whole nodes; no spare ranks here,
    so an iteration needs every rank back (the trainer's batch arithmetic assumes the launch's world)."""
    layers = [inprocess.rank_assignment.Layer(
        min_ranks=world_size, max_ranks=world_size, flag=inprocess.rank_assignment.LayerFlag.RESERVE
    )]
    if cfg.granularity == "node":
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
        layers.append(inprocess.rank_assignment.Layer(
            min_ranks=per_node, max_ranks=per_node, key_or_fn=lambda _: socket.gethostname(),
            flag=inprocess.rank_assignment.LayerFlag.RESERVE,
        ))
    return inprocess.rank_assignment.Tree(layers=layers)


def soft_timeout_may_starve(cfg: InProcessRestartConfig) -> bool:
    """NVRx's monitor process (0.4.1 and 0.7.0) checks its timeouts only when no message arrived within
    ``monitor_process_interval``; every progress timestamp skips the check. A stuck main thread still gets
    one stale timestamp sent per ``progress_watchdog_interval`` for 32 of them (CPython's pending calls),
    so when that interval is not longer the soft timeout is checked only by luck of timing, and the rank
    is killed at the hard timeout instead of restarting in place (seen on GPU and CPU with Bridge's
    defaults, 1 s and 1 s: missed in 11 of 18 CPU runs; a 0.5 s monitor interval caught it in 5 of 5)."""
    return cfg.monitor_process_interval >= cfg.progress_watchdog_interval


def watchdog_before_recovery(cfg: TrainerConfig) -> bool:
    """The card's pitfall: on NCCL, PyTorch's watchdog aborts a collective that outlives the process group's
    timeout (``dist.distributed_timeout_minutes``) and tears the process down; at or below
    ``inprocess_restart.hard_timeout`` it can do so before NVRx's in-process restart recovers the rank. (gloo
    has no watchdog: its timed-out collective raises, which the Wrapper catches.)"""
    return wants_cuda(cfg.dist) and cfg.dist.distributed_timeout_minutes * 60 <= cfg.inprocess_restart.hard_timeout


def report_watchdog_pitfall(cfg: TrainerConfig, base: int) -> None:
    """Warn, and write the ``pitfall`` event, when the NCCL watchdog may win (see ``watchdog_before_recovery``)."""
    if not watchdog_before_recovery(cfg):
        return
    rank = int(os.environ.get("RANK", "0"))
    detail = (
        f"dist.distributed_timeout_minutes {cfg.dist.distributed_timeout_minutes:g} "
        f"({cfg.dist.distributed_timeout_minutes * 60:g} s) <= inprocess_restart.hard_timeout {cfg.inprocess_restart.hard_timeout:g} s"
    )
    if rank == 0:
        log.warning("%s: %s", detail, pitfalls.CARD[pitfalls.NCCL_TIMEOUT_NOT_ABOVE_HARD_TIMEOUT])
    events = EventLog(cfg.logger.run_dir, f"rank-{rank}", rank, attempt=base)
    events.write(Pitfall(pitfalls.NCCL_TIMEOUT_NOT_ABOVE_HARD_TIMEOUT, detail))
    events.close()


def build_wrapper(cfg: TrainerConfig, world_size: int, master_port: int, base: int) -> object:
    ipr = cfg.inprocess_restart
    if soft_timeout_may_starve(ipr) and int(os.environ.get("RANK", "0")) == 0:
        log.warning(
            "inprocess_restart.monitor_process_interval (%g) >= progress_watchdog_interval (%g): NVRx may miss "
            "the soft timeout of a hung rank and kill it at the hard timeout; a monitor interval below the "
            "watchdog's avoids it", ipr.monitor_process_interval, ipr.progress_watchdog_interval,
        )
    health = [inprocess.health_check.CudaHealthCheck(timeout=timedelta(seconds=10))] if torch.cuda.is_available() else []
    return inprocess.Wrapper(
        store_kwargs={"timeout": STORE_TIMEOUT, "port": master_port + 2},
        initialize=inprocess.initialize.RetryController(max_iterations=ipr.max_iterations, min_world_size=world_size),
        abort=inprocess.Compose(inprocess.abort.AbortTorchDistributed(), AbortEvent(cfg.logger.run_dir, base)),
        health_check=inprocess.Compose(*health) if health else None,
        rank_assignment=rank_assignment(ipr, world_size),
        monitor_process_logfile=monitor_log(cfg.logger.run_dir),
        **timeouts(ipr),
    )


def monitor_log(run_dir: str | None) -> str | None:
    """Each rank's NVRx monitor process log in the run folder (it decides terminations: keep its reasons),
    one per launcher round, so that a torchrun restart does not overwrite the round that failed."""
    if run_dir is None:
        return None
    return str(RunFolder(Path(run_dir).resolve()).inprocess_monitor_log(os.environ.get("RANK", "0"), launch_round()))


def run_inprocess(cfg: TrainerConfig) -> int:
    """Train under NVRx's in-process Wrapper (launched by torchrun); returns the process exit code."""
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "error")
    # An aborted NCCL communicator must surface as a Python error the Wrapper can catch, not a crash.
    os.environ.setdefault("TORCH_NCCL_RETHROW_CUDA_ERRORS", "0")
    master_port, world_size = int(os.environ["MASTER_PORT"]), int(os.environ["WORLD_SIZE"])
    coordination = dist.TCPStore(
        host_name=os.environ["MASTER_ADDR"], port=master_port + 1, world_size=world_size,
        is_master=int(os.environ["RANK"]) == 0, timeout=STORE_TIMEOUT, wait_for_workers=True, use_libuv=True,
    )

    def train(call_wrapper: inprocess.CallWrapper = None) -> int:
        iteration = call_wrapper.iteration
        store = dist.PrefixStore(f"inprocess-{iteration}", coordination)
        with TrainingSession(cfg, InProcessIteration(store, base + iteration)) as session:
            session.events.write(InprocessStart(iteration, current_attempt()))
            try:
                return session.run()
            except Exception as e:
                # The failed step's frames hold the trainer and its tensors of the process group. Freed, the
                # group closes its gloo sockets, and peers blocked in a collective with this rank error out
                # at once (gloo has no abort that unblocks them; a peer's closed socket does).
                traceback.clear_frames(e.__traceback__)
                raise

    base = attempt_base(cfg.logger.run_dir)
    report_watchdog_pitfall(cfg, base)
    return build_wrapper(cfg, world_size, master_port, base)(train)()
