"""In-process restart settings: the orderings NVRx's Wrapper asserts are config errors that name the fix."""

from __future__ import annotations

import pytest

from trainer.config_base import ConfigError
from trainer.config_loader import load_config


def config_error(*overrides: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config("tiny_cpu", None, overrides)
    return str(caught.value)


def test_bridge_defaults_are_valid() -> None:
    cfg = load_config("tiny_cpu", None, ["inprocess_restart.enabled=true"]).inprocess_restart
    assert cfg.soft_timeout < cfg.hard_timeout < cfg.barrier_timeout
    assert cfg.heartbeat_interval < cfg.heartbeat_timeout


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["inprocess_restart.soft_timeout=95"], "soft_timeout (95) must be < inprocess_restart.hard_timeout (90)"),
        (["inprocess_restart.hard_timeout=130"], "hard_timeout (130) must be < inprocess_restart.barrier_timeout (120)"),
        (["inprocess_restart.heartbeat_interval=60"], "heartbeat_interval (60) must be < inprocess_restart.heartbeat_timeout (60)"),
        (["inprocess_restart.max_iterations=0"], "max_iterations: must be >= 1"),
    ],
)
def test_a_broken_ordering_names_both_keys(overrides: list[str], message: str) -> None:
    assert message in config_error(*overrides)


def test_straggler_thresholds_are_scores() -> None:
    assert "gpu_relative_perf_threshold" in config_error("nvrx_straggler.gpu_relative_perf_threshold=1.5")
    assert "report_time_interval" in config_error("nvrx_straggler.report_time_interval=0")


def test_bridge_default_intervals_are_flagged_as_able_to_miss_the_soft_timeout() -> None:
    from trainer.resiliency.inprocess import soft_timeout_may_starve

    bridge = load_config("tiny_cpu", None, ["inprocess_restart.enabled=true"]).inprocess_restart
    assert soft_timeout_may_starve(bridge)
    faster = load_config(
        "tiny_cpu", None, ["inprocess_restart.enabled=true", "inprocess_restart.monitor_process_interval=0.5"]
    ).inprocess_restart
    assert not soft_timeout_may_starve(faster)


def test_inprocess_attempts_continue_after_a_launcher_restart(tmp_path, monkeypatch) -> None:
    """The Wrapper counts iterations from 0 in each process; a new launcher round must not reuse the
    attempts of the rounds before it (a fault armed for attempt 0 would fire again)."""
    from runlog.log import EventLog
    from trainer.resiliency.inprocess import attempt_base

    def start(rank: int, attempt: int, launch_round: int) -> None:
        log = EventLog(tmp_path, f"rank-{rank}", rank, attempt)
        log.emit("inprocess_start", inprocess_iteration=attempt, launch_round=launch_round)
        log.close()

    monkeypatch.delenv("CHAOS_ATTEMPT_BASE", raising=False)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    assert attempt_base(str(tmp_path)) == 0
    for rank in (0, 1):
        start(rank, 0, 0)
        start(rank, 1, 0)  # one in-process restart in round 0, then the launcher restarted
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert attempt_base(str(tmp_path)) == 2
    start(0, 2, 1)  # a rank of round 1 that started first does not move the others' base
    assert attempt_base(str(tmp_path)) == 2
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "3")  # round 2 died before its first iteration
    assert attempt_base(str(tmp_path)) == 3
    assert attempt_base(None) == 3
