"""The resiliency card's pitfalls on the trainer's side: the configs it refuses (naming the card), and the
pitfall events it writes when a run falls into one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runlog import pitfalls
from runlog.log import EventLog
from trainer.cli import main
from trainer.config_base import ConfigError
from trainer.config_loader import load_config


def events_of(run_dir: Path, rank: int = 0) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events" / f"rank-{rank}.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(("overrides", "pitfall", "message"), [
    (["checkpoint.async_save=true", "checkpoint.ckpt_format=torch"], pitfalls.ASYNC_SAVE_WITHOUT_TORCH_DIST,
     "async_save with checkpoint.ckpt_format 'torch'.*use torch_dist"),
    (["checkpoint.ckpt_format=fsdp_dtensor"], None, "'fsdp_dtensor' is not implemented here; use torch_dist"),
    (["straggler.log_straggler=true", "nvrx_straggler.enabled=true"], pitfalls.TWO_STRAGGLER_DETECTORS, "never both"),
    (["straggler.log_straggler=true"], None, "legacy straggler detector is not implemented here; use nvrx_straggler"),
    (["checkpoint.non_persistent_ckpt_type=global"], None, "'global' is not implemented here"),
    (["checkpoint.save=/c", "checkpoint.non_persistent_ckpt_type=local", "checkpoint.non_persistent_local_ckpt_dir=/l"],
     None, "checkpoint.non_persistent_save_interval is not set"),
    (["dataset.num_workers=-1"], None, "dataset.num_workers: must be >= 0"),
])
def test_a_refused_config_names_what_to_change_and_the_cards_pitfall(overrides, pitfall, message):
    with pytest.raises(ConfigError, match=message) as refused:
        load_config("tiny_cpu", None, overrides)
    assert refused.value.pitfall == pitfall


def test_the_cli_leaves_a_refusal_in_the_run_folders_events(tmp_path, capsys):
    assert main(["--recipe", "tiny_cpu", "checkpoint.async_save=true", "checkpoint.ckpt_format=torch", f"logger.run_dir={tmp_path}"]) == 2
    assert "trainer: error: checkpoint.async_save with checkpoint.ckpt_format 'torch'" in capsys.readouterr().err
    pitfall, exit_ = events_of(tmp_path)
    assert (pitfall["event"], pitfall["name"]) == ("pitfall", pitfalls.ASYNC_SAVE_WITHOUT_TORCH_DIST)
    assert (exit_["event"], exit_["reason"], exit_["code"]) == ("exit", "error", 2)
    other = tmp_path / "other"
    assert main(["--recipe", "tiny_cpu", "train.train_iters=0", f"logger.run_dir={other}"]) == 2
    assert not other.exists(), "a bad config that is no pitfall writes nothing"


def test_ft_without_ft_launcher_is_a_pitfall_event(tmp_path, monkeypatch):
    from trainer.resiliency.ft import FaultTolerance

    monkeypatch.delenv("FT_RANK_MONITOR_IPC_SOCKET", raising=False)
    events = EventLog(tmp_path, "rank-0", rank=0, attempt=0)
    ft = FaultTolerance(load_config("tiny_cpu", None, ["ft.enable_ft_package=true"]).ft, events, 2, 0)
    assert ft.client is None
    events.close()
    (e,) = events_of(tmp_path)
    assert (e["event"], e["name"]) == ("pitfall", pitfalls.FT_WITHOUT_FT_LAUNCHER)


@pytest.mark.parametrize(("stop", "expected"), [(False, [pitfalls.STRAGGLER_NOT_STOPPED]), (True, [])])
def test_a_flagged_straggler_that_does_not_stop_the_run_is_a_pitfall_once(tmp_path, stop, expected):
    from trainer.resiliency.straggler import StragglerDetection, Verdict

    cfg = load_config("tiny_cpu", None, ["nvrx_straggler.enabled=true", f"nvrx_straggler.stop_if_detected={str(stop).lower()}"])
    events = EventLog(tmp_path, "rank-0", rank=0, attempt=0)
    detector = StragglerDetection(cfg.nvrx_straggler, events)
    for iteration in (10, 20):
        detector._publish(Verdict({0: 1.0, 1: 0.1}, {0: 1.0, 1: 0.1}, [1]), iteration)
    events.close()
    assert [e["name"] for e in events_of(tmp_path) if e["event"] == "pitfall"] == expected
    assert detector.stop_reason(20) == ("straggler_detected" if stop else None)


INPROCESS = [
    "inprocess_restart.enabled=true", "dist.device=cuda", "dist.distributed_timeout_minutes=1",
    "inprocess_restart.soft_timeout=50", "inprocess_restart.hard_timeout=60",
]


def test_the_nccl_watchdog_at_or_below_the_hard_timeout_is_reported(tmp_path, monkeypatch):
    """What the CPU can check of inprocess_nccl_watchdog_gpu: the check, and the warning event."""
    from trainer.resiliency.inprocess import report_watchdog_pitfall, watchdog_before_recovery

    assert watchdog_before_recovery(load_config("tiny_cpu", None, INPROCESS))
    assert not watchdog_before_recovery(load_config("tiny_cpu", None, [*INPROCESS, "dist.distributed_timeout_minutes=2"]))
    assert not watchdog_before_recovery(load_config("tiny_cpu", None, [*INPROCESS, "dist.device=cpu"])), "gloo has no watchdog"
    monkeypatch.setenv("RANK", "1")
    report_watchdog_pitfall(load_config("tiny_cpu", None, [*INPROCESS, f"logger.run_dir={tmp_path}"]), base=0)
    (e,) = events_of(tmp_path, rank=1)
    assert (e["name"], e["detail"]) == (pitfalls.NCCL_TIMEOUT_NOT_ABOVE_HARD_TIMEOUT, "dist.distributed_timeout_minutes 1 (60 s) <= inprocess_restart.hard_timeout 60 s")
