"""Native faults fired by the injector in a forked child: the real signal of a C crash, and a C deadlock that
holds the GIL (no Python thread or signal handler of the process runs again; only SIGKILL ends it); gpu_oom."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from chaos.faults.plan import write_plan
from chaos.hooks.injector import FaultInjector
from chaos.schema.scenario import plan_faults
from runlog.log import EventLog
from runlog.reader import read_events
from trainer.components import TrainContext

CPU = torch.device("cpu")


def armed(tmp_path: Path, make_scenario, fault: dict, device: torch.device = CPU, **scenario) -> FaultInjector:
    plan = tmp_path / "plan.json"
    write_plan(plan, plan_faults(make_scenario(faults=[fault], **scenario), seed=0))
    injector = FaultInjector(plan, EventLog(tmp_path, "rank-1", rank=1, attempt=0, node="here"))
    injector.on_train_start(TrainContext(rank=1, world_size=2, local_rank=1, device=device,
                                         backend="gloo", microbatches=1, async_saves=False), 0)
    return injector


def fork(act) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            act()
        finally:
            os._exit(0)
    return pid


def wait(pid: int, timeout_s: float = 5.0) -> int | None:
    """The child's exit status (negative: its signal), or None while it lives past `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    return None


@pytest.mark.parametrize(("kind", "sig"), [("segfault", signal.SIGSEGV), ("abort", signal.SIGABRT)])
def test_a_native_crash_kills_the_rank_with_the_kernels_signal_at_its_step(tmp_path, make_scenario, kind, sig) -> None:
    injector = armed(tmp_path, make_scenario, {"type": kind, "rank": 1, "at_step": 3})

    def steps() -> None:
        for i in (1, 2, 3, 4):
            injector.before_step(i)
            injector.after_step(i, 1.0)

    assert wait(fork(steps)) == -sig
    (event,) = [e for e in read_events(tmp_path) if e["event"] == "fault_injected"]
    assert (event["fault"], event["iteration"]) == (kind, 3)
    assert event["detail"].startswith(f"{sig.name} in native code at step 3")


def test_a_gil_deadlock_stops_every_thread_and_handler_of_the_rank_until_sigkill(tmp_path, make_scenario) -> None:
    injector = armed(tmp_path, make_scenario, {"type": "gil_deadlock", "rank": 1, "at_step": 2})
    ticks, handled = tmp_path / "ticks", tmp_path / "handled"

    def rank() -> None:
        signal.signal(signal.SIGTERM, lambda *_: handled.touch())

        def heartbeat() -> None:
            while True:
                with ticks.open("a") as f:
                    f.write(".")
                time.sleep(0.01)

        threading.Thread(target=heartbeat, daemon=True).start()
        time.sleep(0.1)
        injector.before_step(1)
        injector.before_step(2)

    pid = fork(rank)
    try:
        assert wait(pid, 0.5) is None
        beats = ticks.read_text()
        os.kill(pid, signal.SIGTERM)
        assert wait(pid, 0.5) is None, "a Python SIGTERM handler cannot run: the process lives on"
        assert ticks.read_text() == beats and beats, "the heartbeat thread stopped with the GIL"
        assert not handled.exists()
    finally:
        os.kill(pid, signal.SIGKILL)
    assert wait(pid) == -signal.SIGKILL
    assert [e["fault"] for e in read_events(tmp_path) if e["event"] == "fault_injected"] == ["gil_deadlock"]


def test_a_gpu_oom_on_a_rank_without_a_gpu_is_missed_with_its_reason(tmp_path, make_scenario) -> None:
    injector = armed(tmp_path, make_scenario, {"type": "gpu_oom", "rank": 1, "at_step": 2}, requires="gpu")
    injector.before_step(2)
    (missed,) = [e for e in read_events(tmp_path) if e["event"] in ("fault_missed", "fault_injected")]
    assert (missed["event"], missed["reason"]) == ("fault_missed", "the rank computes on cpu, not a CUDA device")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="requires: a CUDA device")
def test_a_gpu_oom_is_the_allocators_own_error(tmp_path, make_scenario) -> None:
    injector = armed(tmp_path, make_scenario, {"type": "gpu_oom", "rank": 1, "at_step": 2}, requires="gpu",
                     device=torch.device("cuda", 0))
    with pytest.raises(torch.cuda.OutOfMemoryError):
        injector.before_step(2)
    assert [e["fault"] for e in read_events(tmp_path) if e["event"] == "fault_injected"] == ["gpu_oom"]
