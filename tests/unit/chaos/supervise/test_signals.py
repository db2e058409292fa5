"""Signal faults from outside: the attempt they fire in, and the real pids they go to, waited for when they
are not there yet (output-line steps: test_launch.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.faults.signals.planned import Sigkill, Sigterm
from chaos.supervise import signals
from chaos.supervise.attempts import AttemptTracker
from chaos.supervise.procs import alive, worker_pids
from chaos.supervise.signals import EventSteps, ExternalFaults


class Workers:
    """Real processes that look like a run's workers: the run's marker, a RANK, a launcher round."""

    def __init__(self, run_id: str):
        self.run_id, self.procs = run_id, []

    def start(self, rank: int, round_: int = 0) -> subprocess.Popen:
        env = {"PATH": "/usr/bin:/bin", "CHAOS_RUN_ID": self.run_id, "RANK": str(rank), "TORCHELASTIC_RESTART_COUNT": str(round_)}
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()


@pytest.fixture
def workers() -> Iterator[Workers]:
    made = Workers(f"test-signals-{uuid.uuid4().hex[:8]}")
    yield made
    made.close()


def events(tmp_path: Path) -> list[dict]:
    return [json.loads(x) for x in (tmp_path / "events" / "launcher.jsonl").read_text().splitlines()]


def wait_until_marked(run_id: str, count: int) -> None:
    end = time.monotonic() + 10
    while len(worker_pids(run_id)) < count and time.monotonic() < end:
        time.sleep(0.02)


def test_a_signal_fault_fires_in_an_attempt_only_the_ranks_number(run_logs, tmp_path: Path, workers: Workers) -> None:
    """An in-process restart starts attempt 1 with no launcher line: the ranks' steps tell the runner."""
    procs = [workers.start(0), workers.start(1)]
    wait_until_marked(workers.run_id, 2)
    fault = Sigterm(fault_id="f0", rank=None, attempt=1, at_step=3, delay_s=None, ranks=None, target="all", grace_s=5)
    attempts = AttemptTracker()
    faults = ExternalFaults([fault], run_logs.runner(), attempts, workers.run_id, EventSteps(tmp_path), world_size=2, run_dir=tmp_path)
    first = run_logs.rank(0, attempt=0)
    for step in (1, 2, 3):
        first.emit("step", iteration=step, loss=1.0)
    faults.tick()
    assert faults.armed[0].fired_at is None
    run_logs.rank(0, attempt=1).emit("step", iteration=3, loss=1.0)
    faults.tick()
    assert faults.armed[0].fired_at is not None
    assert (attempts.running(), attempts.launcher()) == (1, 0)
    injected = [e for e in events(tmp_path) if e["event"] == "fault_injected"]
    assert [(e["attempt"], e["iteration"], e["target"], e["grace_s"]) for e in injected] == [(1, 3, "all", 5)]
    assert sorted(e["target"] for e in events(tmp_path) if e["event"] == "signal_sent") == sorted(p.pid for p in procs)
    assert [p.wait(5) for p in procs] == [-15, -15]
    assert (tmp_path / "struck" / "f0").is_file(), "the ranks waiting at step 3 may go on"


def test_a_due_fault_waits_for_its_rank_and_fires_at_it(run_logs, tmp_path: Path, workers: Workers) -> None:
    fault = Sigkill(fault_id="f0", rank=1, attempt=0, at_step=None, delay_s=0.0, ranks=None, target=None)
    faults = ExternalFaults([fault], run_logs.runner(), AttemptTracker(), workers.run_id, EventSteps(tmp_path), world_size=2, run_dir=tmp_path)
    faults.tick()
    assert faults.armed[0].due_since is not None and faults.armed[0].fired_at is None, "nothing to fire at yet"
    workers.start(0)
    wait_until_marked(workers.run_id, 1)
    faults.tick()
    assert faults.armed[0].fired_at is None, "rank 0 is not its target"
    target = workers.start(1)
    wait_until_marked(workers.run_id, 2)
    faults.tick()
    assert faults.armed[0].pids == [target.pid]
    assert target.wait(5) == -9
    injected = [e for e in events(tmp_path) if e["event"] == "fault_injected"]
    assert [e["detail"] for e in injected] == [f"ranks pids [{target.pid}]"]


def test_a_fault_names_the_step_the_run_was_at_when_it_struck(
    run_logs, tmp_path: Path, workers: Workers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding the targets in /proc took 1.3 s on a loaded machine, in which a fast run went on from its trigger
    step 6 to its end: the fault's iteration is where the run was when it struck, not its trigger."""
    target = workers.start(0)
    wait_until_marked(workers.run_id, 1)
    rank = run_logs.rank(0, attempt=0)
    real = signals.worker_pids

    def slow_scan(*args, **kwargs):
        found = real(*args, **kwargs)
        for step in (4, 5, 6):
            rank.emit("step", iteration=step, loss=1.0)
        return found

    monkeypatch.setattr(signals, "worker_pids", slow_scan)
    fault = Sigkill(fault_id="f0", rank=0, attempt=0, at_step=3, delay_s=None, ranks=None, target=None)
    faults = ExternalFaults([fault], run_logs.runner(), AttemptTracker(), workers.run_id, EventSteps(tmp_path), world_size=1, run_dir=tmp_path)
    for step in (1, 2, 3):
        rank.emit("step", iteration=step, loss=1.0)
    faults.tick()
    assert target.wait(5) == -9
    assert [e["iteration"] for e in events(tmp_path) if e["event"] == "fault_injected"] == [6]


def test_a_worker_of_the_round_before_is_not_a_target(run_logs, tmp_path: Path, workers: Workers) -> None:
    """After a restart line, the dying workers of round 0 are still there for a moment: round 1's are wanted."""
    old = workers.start(1, round_=0)
    wait_until_marked(workers.run_id, 1)
    attempts = AttemptTracker()
    attempts.joined("launcher", 0)
    attempts.restarted("launcher")
    fault = Sigkill(fault_id="f0", rank=1, attempt=1, at_step=None, delay_s=0.0, ranks=None, target=None)
    faults = ExternalFaults([fault], run_logs.runner(), attempts, workers.run_id, EventSteps(tmp_path), world_size=2, run_dir=tmp_path)
    faults.tick()
    assert faults.armed[0].fired_at is None and old.poll() is None
    new = workers.start(1, round_=1)
    wait_until_marked(workers.run_id, 2)
    faults.tick()
    assert faults.armed[0].pids == [new.pid] and old.poll() is None


def test_a_fault_whose_target_never_appears_is_missed_not_injected(
    run_logs, tmp_path: Path, workers: Workers, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(signals, "TARGET_WAIT_S", 0.2)
    late = Sigkill(fault_id="f0", rank=1, attempt=0, at_step=None, delay_s=0.0, ranks=None, target=None)
    ended = Sigkill(fault_id="f1", rank=0, attempt=0, at_step=None, delay_s=0.0, ranks=None, target=None)
    faults = ExternalFaults([late], run_logs.runner(), AttemptTracker(), workers.run_id, EventSteps(tmp_path), world_size=2, run_dir=tmp_path)
    faults.tick()
    time.sleep(0.3)
    faults.tick()
    at_end = ExternalFaults([ended], run_logs.runner(), AttemptTracker(), workers.run_id, EventSteps(tmp_path), world_size=2, run_dir=tmp_path)
    at_end.tick()
    at_end.close()
    missed = [(e["event"], e["fault_id"], e["target_rank"], e["reason"]) for e in events(tmp_path)]
    assert missed == [
        ("fault_missed", "f0", 1, "no process of rank 1 within 0.2 s of its trigger"),
        ("fault_missed", "f1", 0, "the run ended before rank 0 had a process"),
    ]
    assert sorted(p.name for p in (tmp_path / "struck").iterdir()) == ["f0", "f1"], "a missed fault holds no rank"


def test_worker_pids_ignore_processes_of_other_runs() -> None:
    assert worker_pids("no-such-run") == {}
    assert alive(os.getpid()) and not alive(2**22 + 1)


def test_epoch_counters_become_global_monotone_steps() -> None:
    steps = signals.EpochSteps()
    first = [steps.step(e, i) for e in (0, 1) for i in range(4)] + [steps.step(2, 0), steps.step(2, 1)]
    assert first == list(range(1, 11))
    assert [steps.step(1, 2), steps.step(1, 3), steps.step(2, 0)] == [7, 8, 9], "a resume continues the count"
    one_based = signals.EpochSteps()
    assert [one_based.step(e, i) for e in (1, 2) for i in (1, 2, 3)] == [1, 2, 3, 4, 5, 6]


def test_a_match_that_is_no_number_is_no_step(tmp_path: Path) -> None:
    steps = signals.LogSteps(tmp_path, r"^step (?P<step>\S+)( loss (?P<loss>\S+))?")
    for line in ("step x loss 1", "step 3 loss nope", "step 4"):
        steps.line(line, 0)
    steps.close()
    assert steps.poll() == [(0, 4)]
