"""The deadline clock against real event files: what counts is the launch's time less each attempt's
start-up (its launch or restart line to its first step), and start-up is granted up to the deadline."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.supervise.deadline import DeadlineClock
from runlog import names
from runlog.log import EventLog


def step(run_dir: Path, attempt: int, mono: float, rank: int = 0) -> None:
    log = EventLog(run_dir, f"rank-{rank}", rank=rank, attempt=attempt)
    log.emit(names.STEP, iteration=1, loss=1.0, mono=mono)
    log.close()


def test_an_attempts_start_up_is_not_counted_until_its_first_step(tmp_path: Path) -> None:
    clock = DeadlineClock(10, tmp_path)
    clock.launched(0, 100.0)
    assert clock.counted(105.0) == 0  # still starting: nothing counts
    step(tmp_path, 0, 106.0)
    assert clock.counted(109.0) == pytest.approx(3.0)


def test_a_restart_starts_a_new_grant_that_old_steps_do_not_end(tmp_path: Path) -> None:
    clock = DeadlineClock(100, tmp_path)
    clock.launched(0, 100.0)
    step(tmp_path, 0, 104.0)
    assert clock.counted(110.0) == pytest.approx(6.0)
    clock.attempt_began(1, 110.0)
    step(tmp_path, 0, 110.5, rank=1)  # a late step of the attempt that is being replaced
    assert clock.counted(150.0) == pytest.approx(6.0)
    step(tmp_path, 1, 160.0)
    assert clock.counted(170.0) == pytest.approx(16.0)


def test_a_restart_before_any_step_grants_the_start_up_so_far(tmp_path: Path) -> None:
    clock = DeadlineClock(30, tmp_path)
    clock.launched(0, 0.0)
    clock.attempt_began(1, 5.0)
    step(tmp_path, 1, 8.0)
    assert clock.counted(10.0) == pytest.approx(2.0)


def test_start_up_is_granted_up_to_the_deadline_so_workers_that_never_start_are_still_killed(tmp_path: Path) -> None:
    clock = DeadlineClock(10, tmp_path)
    clock.launched(0, 0.0)
    assert clock.counted(10.0) == 0
    assert clock.counted(25.0) == pytest.approx(15.0)  # past the deadline at 20 s: twice the deadline at most
