"""Limits that grow with the run's own start-up (``startups``): a recovery that starts workers again is
judged against the start the same run measured, so a loaded machine moves both alike (issue 34)."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from chaos.judge.timeline import Metrics, compute_metrics
from chaos.judge.verdicts import judge
from chaos.schema.expect import Expect, Limit

RECOVERED = Metrics(
    exit_code=0, restarts=1, completed_steps=12, wall_s=30.0, goodput=0.1, losses={}, checkpoints_saved=(5,),
    checkpoints_corrupt=(), attempt_starts=(3.0, 20.0), time_to_recover_s=25.0, start_s=8.0,
)


def ev(event: str, mono: float, rank: int = 0, **fields) -> dict:
    return {"event": event, "mono": mono, "rank": rank, "attempt": 0, **fields}


def test_the_first_start_is_the_launch_to_the_first_step() -> None:
    events = [ev("launch", 100.0, rank=-1), ev("run_start", 103.0), ev("step", 104.5, iteration=1, loss=1.0, step_time=0.1)]
    assert compute_metrics(events).start_s == pytest.approx(4.5)
    assert compute_metrics(events[:2]).start_s is None  # never stepped


def test_a_recovery_limit_allows_the_runs_own_start_ups_on_top_of_its_max() -> None:
    expect = Expect.model_validate({"time_to_recover_s": {"max": 10, "startups": 2}})
    (verdict,) = judge(expect, RECOVERED)[1:]
    assert verdict.passed and verdict.bounds == {"max": 26.0}  # 10 + 2 x 8 s
    (slow,) = judge(expect, dataclasses.replace(RECOVERED, time_to_recover_s=27.0))[1:]
    assert not slow.passed and slow.message() == "time_to_recover_s: expected <= 26 (<= 10 + 2 x start-up), observed 27"


def test_without_a_measured_start_the_max_alone_holds() -> None:
    (verdict,) = judge(Expect.model_validate({"time_to_recover_s": {"max": 10, "startups": 2}}), dataclasses.replace(RECOVERED, start_s=None))[1:]
    assert not verdict.passed and verdict.bounds == {"max": 10}


def test_startups_need_a_max_and_say_so() -> None:
    with pytest.raises(ValidationError, match="startups adds to max"):
        Limit.model_validate({"min": 3, "startups": 2})
    assert Limit.model_validate({"min": 1, "max": 10, "startups": 2}).describe() == ">= 1 and <= 10 + 2 x start-up"
