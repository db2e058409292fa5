"""The fault injector as the trainer drives it: a real plan file, the trainer's hooks called in its order.

A fault that kills or stops its own process is fired in a forked child, so the test sees the real signal
and the event the child wrote first.
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from chaos.faults.plan import write_plan
from chaos.faults.process.planned import InjectedFault
from chaos.hooks.injector import FaultInjector
from chaos.schema.scenario import plan_faults
from runlog.log import EventLog
from runlog.reader import read_events
from trainer.checkpoint import Candidate, list_checkpoints, verify, write_manifest
from trainer.components import LoadPhase, SavePhase, TrainContext


def context(async_saves: bool = False, microbatches: int = 1) -> TrainContext:
    return TrainContext(rank=1, world_size=2, local_rank=1, device=torch.device("cpu"), backend="gloo",
                        microbatches=microbatches, async_saves=async_saves)


@pytest.fixture
def injector(tmp_path: Path, make_scenario) -> Callable[..., FaultInjector]:
    """The injector of rank 1 (attempt `attempt`) for a scenario with these `faults`."""
    made: list[EventLog] = []

    def build(faults: list[dict], attempt: int = 0, node: str = "here", **scenario) -> FaultInjector:
        plan = tmp_path / "plan.json"
        write_plan(plan, plan_faults(make_scenario(faults=faults, **scenario), seed=0))
        events = EventLog(tmp_path, "rank-1", rank=1, attempt=attempt, node=node)
        made.append(events)
        return FaultInjector(plan, events)

    yield build
    for events in made:
        events.close()


def injected(tmp_path: Path) -> list[tuple]:
    return [(e["fault"], e["iteration"], e["detail"]) for e in read_events(tmp_path) if e["event"] == "fault_injected"]


def in_child(act: Callable[[], None]) -> int:
    """Run `act` in a forked child; its exit status (negative: the signal that ended it)."""
    pid = os.fork()
    if pid == 0:
        try:
            act()
        finally:
            os._exit(0)
    for _ in range(200):
        done, status = os.waitpid(pid, os.WNOHANG | os.WUNTRACED)
        if done:
            if os.WIFSTOPPED(status):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return -os.WSTOPSIG(status)
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("the child neither exited nor stopped")


def test_only_this_ranks_faults_of_this_attempt_are_armed(injector) -> None:
    armed = injector([
        {"type": "rank_killed", "rank": 1, "at_step": 3},
        {"type": "rank_killed", "rank": 0, "at_step": 3},
        {"type": "exception", "rank": 1, "at_step": 4, "attempt": 1},
        {"type": "nan_loss", "rank": 1, "at_step": 5, "persistence": "persistent", "attempt": 1},
        {"type": "sigkill", "rank": 1, "at_step": 6},
    ])
    assert [(f.type, f.attempt) for f in armed.faults] == [("rank_killed", 0), ("nan_loss", 1)]


@pytest.mark.parametrize(("kind", "sig"), [("rank_killed", signal.SIGKILL), ("rank_hung", signal.SIGSTOP)])
def test_a_rank_fault_signals_its_own_process_at_its_step_after_logging_it(injector, tmp_path: Path, kind: str, sig) -> None:
    armed = injector([{"type": kind, "rank": 1, "at_step": 3}])

    def steps() -> None:
        armed.on_train_start(context(), 0)
        for step in (1, 2, 3, 4):
            armed.before_step(step)

    assert in_child(steps) == -sig
    assert injected(tmp_path) == [(kind, 3, "at step 3")]


def test_a_fault_by_time_fires_after_its_delay_with_the_last_completed_step(injector, tmp_path: Path) -> None:
    armed = injector([{"type": "rank_killed", "rank": 1, "after_s": 0.1}])

    def train() -> None:
        armed.on_train_start(context(), 0)
        for step in range(1, 100):
            armed.before_step(step)
            time.sleep(0.01)
            armed.after_step(step, 1.0)

    assert in_child(train) == -signal.SIGKILL
    ((fault, iteration, detail),) = injected(tmp_path)
    assert fault == "rank_killed" and iteration >= 1 and detail.startswith("after 0.1")


def test_an_exception_fault_raises_inside_the_step(injector, tmp_path: Path) -> None:
    armed = injector([{"type": "exception", "rank": 1, "at_step": 2, "message": "boom"}])
    armed.on_train_start(context(), 0)
    armed.before_step(1)
    with pytest.raises(InjectedFault, match=r"boom \(rank 1, step 2\)"):
        armed.before_step(2)
    assert injected(tmp_path) == [("exception", 2, "boom")]


def test_loss_faults_corrupt_the_computations_their_persistence_says(injector, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CHAOS_NODE_ID", "node-a")  # the planning machine, and the rank's node: the faulty one
    armed = injector([
        {"type": "nan_loss", "rank": 1, "at_step": 2},
        {"type": "spiky_loss", "rank": 1, "at_step": 3, "factor": 10.0, "persistence": "persistent"},
    ], node="node-a")
    loss = torch.tensor(2.0)
    assert armed.on_loss(1, 0, loss) == loss
    assert math.isnan(armed.on_loss(2, 0, loss))
    assert armed.on_loss(2, 1, loss) == loss  # transient: the rerun in place is clean
    assert armed.on_loss(3, 0, loss) == 20.0 and armed.on_loss(3, 1, loss) == 20.0  # persistent: every computation
    armed.on_loss(3, 1, loss)
    assert [(f, i) for f, i, _ in injected(tmp_path)] == [("nan_loss", 2), ("spiky_loss", 3), ("spiky_loss", 3)]
    assert injected(tmp_path)[1][2] == "persistent, computation 0 on node-a"


def test_a_persistent_loss_fault_spares_another_node(injector, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CHAOS_NODE_ID", "node-a")  # the planning machine: the faulty node
    armed = injector([{"type": "nan_loss", "rank": 1, "at_step": 2, "persistence": "persistent"}], attempt=1, node="node-b")
    assert armed.on_loss(2, 0, torch.tensor(2.0)) == 2.0
    assert injected(tmp_path) == []


def test_a_slow_rank_stretches_every_later_forward_pass(injector, tmp_path: Path) -> None:
    armed = injector([{"type": "slow_rank", "rank": 1, "at_step": 2, "seconds": 0.06}])
    armed.on_train_start(context(microbatches=2), 0)

    def forward_s(step: int) -> float:
        armed.before_step(step)
        t0 = time.perf_counter()
        armed.before_forward(step, 0)
        armed.after_forward(step, 0)
        return time.perf_counter() - t0

    assert forward_s(1) < 0.02
    assert forward_s(2) >= 0.03  # 0.06 s per step over two micro-batches
    armed.close()
    assert injected(tmp_path) == [("slow_rank", 2, "from step 2: {'seconds': 0.06}")]


def test_a_storage_fault_breaks_the_newest_candidate_before_the_choice(injector, tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    for it in (5, 10):
        (root / f"iter_{it:07d}").mkdir(parents=True)
        (root / f"iter_{it:07d}" / "data.distcp").write_bytes(bytes(256) * 8)
        write_manifest(root / f"iter_{it:07d}", it, 2)
    armed = injector([{"type": "checkpoint_corrupt", "attempt": 1, "rank": 1, "mode": "garble"}], attempt=1)
    candidates = [Candidate(i, f) for i, f in list_checkpoints(root)]
    armed.on_load(LoadPhase.READ, candidates[:1])  # not at the choice: nothing
    assert verify(root / "iter_0000010") is None
    armed.on_load(LoadPhase.CHOOSE, candidates)
    assert verify(root / "iter_0000010") is not None and verify(root / "iter_0000005") is None
    assert injected(tmp_path) == [("checkpoint_corrupt", None, f"garble {root / 'iter_0000010' / 'data.distcp'}")]


def test_a_storage_fault_with_no_checkpoint_to_break_is_missed_not_injected(injector, tmp_path: Path) -> None:
    armed = injector([{"type": "checkpoint_corrupt", "attempt": 1, "rank": 1, "mode": "truncate"}], attempt=1)
    armed.on_load(LoadPhase.CHOOSE, [])
    assert injected(tmp_path) == []
    missed = [(e["fault"], e["fault_id"], e["target_rank"], e["reason"]) for e in read_events(tmp_path) if e["event"] == "fault_missed"]
    assert missed == [("checkpoint_corrupt", "f0", 1, "no checkpoint to corrupt at the load")]


def test_a_fault_during_a_sync_save_kills_inside_that_save(injector, tmp_path: Path) -> None:
    armed = injector([{"type": "fault_during_checkpoint", "rank": 1, "at_step": 10}])

    def saves() -> None:
        armed.on_train_start(context(), 0)
        for step in (5, 10):
            for phase in SavePhase:
                armed.on_save(phase, step)

    assert in_child(saves) == -signal.SIGKILL
    assert injected(tmp_path) == [("fault_during_checkpoint", 10, "inside the save of step 10")]


def test_a_fault_during_an_async_save_kills_while_it_is_in_flight_only(injector, tmp_path: Path) -> None:
    armed = injector([{"type": "fault_during_checkpoint", "rank": 1, "at_step": 10}])

    def saves(sealed_at_once: bool) -> Callable[[], None]:
        def run() -> None:
            armed.on_train_start(context(async_saves=True), 0)
            armed.on_save(SavePhase.BEGIN, 10)
            armed.on_save(SavePhase.ISSUED, 10)
            if sealed_at_once:
                armed.on_save(SavePhase.SEALED, 10)
            armed.before_step(11)
        return run

    assert in_child(saves(sealed_at_once=True)) == 0
    assert in_child(saves(sealed_at_once=False)) == -signal.SIGKILL
    assert injected(tmp_path) == [("fault_during_checkpoint", 10, "async save of step 10 in flight")]


def test_a_fault_during_the_load_kills_while_the_checkpoint_is_read(injector, tmp_path: Path) -> None:
    armed = injector([{"type": "fault_during_checkpoint", "rank": 1, "during": "load", "attempt": 1}], attempt=1)
    armed.on_load(LoadPhase.CHOOSE, [])
    assert in_child(lambda: armed.on_load(LoadPhase.READ, [])) == -signal.SIGKILL
    assert injected(tmp_path) == [("fault_during_checkpoint", None, "inside the checkpoint load")]


def test_only_a_collective_hang_acts_before_the_gradient_all_reduce(injector, tmp_path: Path) -> None:
    """A kill is not fired at the all-reduce; the collective hang strikes there at its step only, and when its
    receive fails (here: no process group at all) it fails as an aborted collective."""
    injector([{"type": "rank_killed", "rank": 1, "at_step": 3}]).before_grad_reduce(3, 0)
    hang = injector([{"type": "collective_hang", "rank": 1, "at_step": 3}])
    hang.on_train_start(context(), 0)
    hang.before_grad_reduce(2, 0)
    assert injected(tmp_path) == []
    with pytest.raises(RuntimeError, match="collective aborted: rank 1 hung in the all-reduce of step 3"):
        hang.before_grad_reduce(3, 0)
    assert injected(tmp_path) == [("collective_hang", 3, "inside the gradient all-reduce (bucket 0)")]


def test_every_rank_waits_at_a_supervisor_fault_step_until_it_is_struck(
    injector, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The runner strikes a SIGTERM of step 4 once it has read the step and found the pids; the rank goes on
    only after that (or after HOLD_S), and not at any other step or attempt."""
    import threading

    from chaos.hooks import injector as module
    from runlog.layout import RunFolder

    faults = [{"type": "sigterm", "target": "all", "at_step": 4, "grace_s": 5}]
    assert injector(faults, attempt=1).awaited == [], "a fault of attempt 0 does not hold attempt 1"
    rank = injector(faults)
    mark = RunFolder(tmp_path).struck("f0")
    rank.after_step(3, 1.0)
    assert not mark.exists()

    def strike() -> None:
        time.sleep(0.3)
        mark.parent.mkdir(exist_ok=True)
        mark.touch()

    threading.Thread(target=strike).start()
    rank.after_step(4, 1.0)
    assert mark.exists(), "the rank went on before the fault was struck"
    assert rank.awaited == [], "it waits once"

    mark.unlink()
    monkeypatch.setattr(module, "HOLD_S", 0.1)
    unstruck = injector([{"type": "sigkill", "rank": 0, "at_step": 2}])
    unstruck.after_step(2, 1.0)  # f0 of this plan is not struck: the rank goes on after HOLD_S
    assert unstruck.awaited == []
