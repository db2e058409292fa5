"""Detections bounded by the FT heartbeat timeout the fault met (``timeouts``): a learned timeout varies with
how fast the run stepped, so the bound follows the timeout the run's own ``ft_timeouts`` events report."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from chaos.judge.registry import EXPECTATIONS
from chaos.judge.timeline import Metrics, compute_metrics
from chaos.judge.verdicts import judge
from chaos.schema.expect import TIMEOUT_BOUNDED, Expect, Limit

HUNG = Metrics(
    exit_code=0, restarts=1, completed_steps=12, wall_s=30.0, goodput=0.1, losses={}, checkpoints_saved=(5,),
    checkpoints_corrupt=(), attempt_starts=(3.0, 20.0), time_to_detect_s=10.2, heartbeat_timeout_s=10.0,
    time_to_detect_last_s=9.16, heartbeat_timeout_last_s=8.9,
)


def ev(event: str, mono: float, rank: int = 0, attempt: int = 0, **fields) -> dict:
    return {"event": event, "mono": mono, "rank": rank, "attempt": attempt, **fields}


def timeouts(mono: float, subsequent: float, rank: int = 1, attempt: int = 0, calculated: bool = False) -> dict:
    return ev("ft_timeouts", mono, rank, attempt, heartbeat={"initial": 60.0, "subsequent": subsequent}, sections={}, calculated=calculated)


def test_each_fault_meets_the_timeout_its_rank_reported_last_in_its_attempt() -> None:
    events = [
        ev("launch", 0.0, rank=-1), timeouts(1.0, 10.0), timeouts(1.0, 10.0, rank=0),
        ev("fault_injected", 5.0, rank=1, fault="rank_hung", target_rank=1), ev("ft_timeout", 15.1, rank=-1),
        timeouts(20.0, 10.0, attempt=1), timeouts(30.0, 1.6, attempt=1, calculated=True),
        timeouts(40.0, 1.6, attempt=2, calculated=True), timeouts(40.0, 99.0, rank=0, attempt=2),  # another rank's
        ev("fault_injected", 45.0, rank=1, attempt=2, fault="rank_hung", target_rank=1), ev("ft_timeout", 46.8, rank=-1),
    ]
    metrics = compute_metrics(events)
    assert (metrics.heartbeat_timeout_s, metrics.heartbeat_timeout_last_s) == (10.0, 1.6)
    assert metrics.time_to_detect_last_s == pytest.approx(1.8)
    assert compute_metrics(events[:1] + events[3:5]).heartbeat_timeout_s is None  # its rank reported none


def test_a_detection_limit_adds_the_timeout_the_fault_met_to_both_bounds() -> None:
    expect = Expect.model_validate({
        "time_to_detect_s": {"min": -0.5, "max": 2, "timeouts": 1},
        "time_to_detect_last_s": {"min": -0.5, "max": 2, "timeouts": 1},
        "heartbeat_timeout_last_s": {"max": 9.5},
    })
    first, last, learned = judge(expect, HUNG)[1:]
    assert first.passed and first.bounds == {"min": 9.5, "max": 12.0}
    assert last.passed and last.bounds == pytest.approx({"min": 8.4, "max": 10.9})
    assert last.message() == "time_to_detect_last_s: expected >= 8.4 and <= 10.9 (>= -0.5 + 1 x heartbeat timeout and <= 2 + 1 x heartbeat timeout), observed 9.16"
    assert learned.passed
    (late,) = judge(Expect.model_validate({"time_to_detect_last_s": {"max": 2, "timeouts": 1}}), dataclasses.replace(HUNG, time_to_detect_last_s=11.0))[1:]
    assert not late.passed


def test_without_a_reported_timeout_the_stated_seconds_alone_hold() -> None:
    (verdict,) = judge(Expect.model_validate({"time_to_detect_last_s": {"max": 2, "timeouts": 1}}),
                       dataclasses.replace(HUNG, heartbeat_timeout_last_s=None))[1:]
    assert not verdict.passed and verdict.bounds == {"max": 2}
    assert verdict.expected == "<= 2 + 1 x heartbeat timeout"


def test_only_detections_take_timeouts_and_the_registry_agrees() -> None:
    assert {name for name, e in EXPECTATIONS.items() if e.timeout} == set(TIMEOUT_BOUNDED)
    with pytest.raises(ValidationError, match="time_to_recover_s.timeouts: only time_to_detect_s and time_to_detect_last_s"):
        Expect.model_validate({"time_to_recover_s": {"max": 10, "timeouts": 1}})
    with pytest.raises(ValidationError, match="greater than 0"):
        Limit.model_validate({"max": 1, "timeouts": 0})
