"""Preemption handler, storage faults, signal-fault schema, external step observation, metrics, repeat/replay."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
import yaml

from chaos.hooks.storage import corrupt_newest
from chaos.judge.timeline import compute_metrics
from chaos.repeat import replay_inputs, spread
from chaos.schema.plan import PlannedFault, plan_faults
from chaos.schema.scenario import ScenarioError, parse_scenario
from chaos.supervise.runner import SCENARIO_COPY, external_command
from chaos.supervise.signals import EventSteps, ExternalFaults, LogSteps, alive, worker_pids
from runlog.log import EventLog
from trainer.checkpoint import Candidate, list_checkpoints, verify, write_manifest
from trainer.config import ConfigError
from trainer.resiliency.preemption import Preemption, parse_signal

BASE = {"schema_version": 1, "name": "t", "description": "d", "world_size": 2, "trainer": {"train.train_iters": 20, "checkpoint.save_interval": 5}}


def scenario(**fields):
    return parse_scenario({**BASE, **fields}, "t.yaml")


def test_preemption_records_and_reports_once(tmp_path: Path) -> None:
    events = EventLog(tmp_path, "rank-0", rank=0, attempt=0)
    handler = Preemption("SIGUSR1", events)
    try:
        assert handler.stop_reason(3) is None
        os.kill(os.getpid(), signal.SIGUSR1)
        assert handler.stop_reason(4) == "signal"
        assert handler.stop_reason(5) == "signal"
    finally:
        handler.close()
        events.close()
    lines = [json.loads(x) for x in (tmp_path / "events" / "rank-0.jsonl").read_text().splitlines()]
    assert [(e["event"], e["signal"], e["iteration"]) for e in lines] == [("signal_received", "SIGUSR1", 4)]
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL


@pytest.mark.parametrize("name", ["SIGKILL", "SIGSTOP", "SIGNOPE"])
def test_uncatchable_or_unknown_exit_signal_is_a_config_error(name: str) -> None:
    with pytest.raises(ConfigError, match="train.exit_signal"):
        parse_signal(name)


@pytest.mark.parametrize("mode", ["truncate", "garble"])
def test_corrupt_newest_breaks_only_the_newest_checkpoint(tmp_path: Path, mode: str) -> None:
    for it in (5, 10):
        folder = tmp_path / f"iter_{it:07d}"
        folder.mkdir()
        (folder / "data.distcp").write_bytes(bytes(range(256)) * 8)
        (folder / "small").write_bytes(b"x")
        write_manifest(folder, it, 1)
    victim = corrupt_newest([Candidate(i, f) for i, f in list_checkpoints(tmp_path)], mode)
    assert victim == tmp_path / "iter_0000010" / "data.distcp"
    assert verify(tmp_path / "iter_0000010") is not None
    assert verify(tmp_path / "iter_0000005") is None


def test_corrupt_newest_without_checkpoints_is_none(tmp_path: Path) -> None:
    assert corrupt_newest([], "truncate") is None


def test_signal_fault_needs_exactly_one_target() -> None:
    with pytest.raises(ScenarioError, match="exactly one target"):
        scenario(faults=[{"type": "sigterm", "rank": 1, "target": "all", "at_step": 3}])
    with pytest.raises(ScenarioError, match=r"faults\[0\].ranks: 2 is outside"):
        scenario(faults=[{"type": "sigkill", "ranks": [0, 2], "at_step": 3}])
    s = scenario(faults=[{"type": "sigterm", "target": "launcher", "after_s": 1, "grace_s": 2}])
    assert s.faults[0].grace_s == 2


def test_load_faults_take_no_trigger_and_a_later_attempt() -> None:
    with pytest.raises(ScenarioError, match="attempt must be 1 or more"):
        scenario(faults=[{"type": "checkpoint_corrupt"}])
    with pytest.raises(ScenarioError, match="leave out at_step"):
        scenario(faults=[{"type": "fault_during_checkpoint", "during": "load", "rank": 0, "at_step": 3, "attempt": 1}])
    with pytest.raises(ScenarioError, match="not a checkpoint step"):
        scenario(faults=[{"type": "fault_during_checkpoint", "rank": 0, "at_step": 7}])
    with pytest.raises(ScenarioError, match="give at_step"):
        scenario(faults=[{"type": "collective_hang", "rank": 0, "after_s": 1}])


def test_command_scenarios_take_signal_faults_and_a_step_group() -> None:
    cmd = {"command": ["python", "x.py"], "trainer": {}}
    with pytest.raises(ScenarioError, match="signal faults only"):
        parse_scenario({**BASE, **cmd, "faults": [{"type": "rank_killed", "rank": 0, "at_step": 2}]}, "t.yaml")
    with pytest.raises(ScenarioError, match="named group"):
        parse_scenario({**BASE, **cmd, "step_pattern": r"step (\d+)"}, "t.yaml")
    with pytest.raises(ScenarioError, match="step_pattern: required"):
        parse_scenario({**BASE, **cmd, "faults": [{"type": "sigkill", "rank": 0, "at_step": 2}]}, "t.yaml")


def test_plan_keeps_signal_targets_and_draws_no_rank_for_them() -> None:
    s = scenario(faults=[{"type": "sigterm", "target": "all", "at_step": 3, "grace_s": 4}, {"type": "random", "at_step": 4}])
    plan = plan_faults(s, 7)
    assert (plan[0].rank, plan[0].options) == (None, {"target": "all", "grace_s": 4.0})
    alone = plan_faults(scenario(faults=[{"type": "random", "at_step": 4}]), 7)[0]
    assert (plan[1].type, plan[1].rank) == (alone.type, alone.rank)  # a signal fault draws nothing


def test_external_command_substitutes_interpreter_and_run_dir(tmp_path: Path) -> None:
    argv = external_command(["python", "s.py", "--ckpt", "{run_dir}/c.pt"], tmp_path)
    assert argv[0] == sys.executable
    assert argv[1:] == ["s.py", "--ckpt", f"{tmp_path}/c.pt"]


def test_log_steps_count_attempts_from_restart_lines_in_order(tmp_path: Path) -> None:
    log = tmp_path / "launcher.log"
    log.write_text(
        "step 1 loss 2.5\nstep 2 loss 2.0\n"
        "[default] Worker group FAILED. 3/3 attempts left; will restart worker group\n"
        "step 1 loss 2.5\nstep 2 lo"
    )
    steps = LogSteps(tmp_path, r"^step (?P<step>\d+) loss (?P<loss>\S+)")
    assert steps.poll() == [(0, 1), (0, 2), (1, 1)]
    with open(log, "a") as f:
        f.write("ss 1.9\n")
    assert steps.poll() == [(1, 2)]
    steps.close()
    observed = [json.loads(x) for x in (tmp_path / "events" / "observed.jsonl").read_text().splitlines()]
    assert [(e["attempt"], e["iteration"], e["loss"], e["observed"]) for e in observed][-1] == (1, 2, 1.9, True)


def test_a_signal_fault_fires_in_an_attempt_only_the_ranks_number(tmp_path: Path) -> None:
    """An in-process restart starts attempt 1 with no launcher line: the ranks' steps tell the runner."""
    fault = PlannedFault("f0", "sigterm", None, attempt=1, at_step=3, delay_s=None, options={"target": "all", "grace_s": 5})
    runner = EventLog(tmp_path, "runner", rank=-1, attempt=0)
    faults = ExternalFaults([fault], runner, "no-such-run", EventSteps(tmp_path))
    ranks = EventLog(tmp_path, "rank-0", rank=0, attempt=0)
    for step in (1, 2, 3):
        ranks.emit("step", iteration=step)
    faults.tick()
    assert faults.armed[0].fired_at is None
    ranks.attempt = 1
    ranks.emit("step", iteration=3)
    faults.tick()
    assert faults.armed[0].fired_at is not None
    fired = [json.loads(x) for x in (tmp_path / "events" / "runner.jsonl").read_text().splitlines()]
    assert [(e["event"], e["attempt"], e["iteration"]) for e in fired] == [("fault_injected", 1, 3)]


def test_worker_pids_ignore_processes_of_other_runs() -> None:
    assert worker_pids("no-such-run") == []
    assert alive(os.getpid()) and not alive(2**22 + 1)


def _ev(event: str, mono: float, rank: int = 0, attempt: int = 0, **fields) -> dict:
    return {"event": event, "rank": rank, "attempt": attempt, "mono": mono, **fields}


def test_preemption_metrics_inside_and_outside_the_grace() -> None:
    term = _ev("fault_injected", 10.0, rank=-1, fault="sigterm", grace_s=1.0, target_rank=None)
    saved = [term, _ev("checkpoint_save_end", 10.5, iteration=12)]
    m = compute_metrics(saved)
    assert (m.preemption_saved, m.grace_killed, m.faults_injected) == (True, False, 1)
    late = [term, _ev("signal_sent", 11.0, rank=-1, signal="SIGKILL", target=1, pid=1), _ev("checkpoint_save_end", 11.5, iteration=12)]
    m = compute_metrics(late)
    assert (m.preemption_saved, m.grace_killed) == (False, True)
    assert compute_metrics([_ev("step", 1.0, iteration=1, loss=1.0)]).preemption_saved is None


def test_resumed_from_is_the_step_before_the_first_step_without_a_load() -> None:
    events = [
        _ev("step", 1.0, iteration=12, loss=1.0),
        _ev("fault_injected", 2.0, rank=-1, fault="sigkill", target_rank=1),
        _ev("step", 5.0, attempt=1, iteration=11, loss=1.0),
    ]
    m = compute_metrics(events)
    assert (m.resumed_from_step, m.lost_steps) == (10, 2)


def test_spread_takes_numbers_only() -> None:
    journals = [{"metrics": {"lost_steps": v, "time_to_detect_s": None}} for v in (3, 1, 2)]
    s = spread(journals)
    assert (s["lost_steps"].min, s["lost_steps"].median, s["lost_steps"].max, s["lost_steps"].n) == (1, 2, 3, 3)
    assert "time_to_detect_s" not in s


def test_replay_refuses_a_journal_whose_plan_differs(tmp_path: Path) -> None:
    s = scenario(faults=[{"type": "random", "at_step": 4}])
    (tmp_path / SCENARIO_COPY).write_text(yaml.safe_dump(s.model_dump(mode="json")))
    plan = [p.__dict__ for p in plan_faults(s, 11)]
    (tmp_path / "journal.json").write_text(json.dumps({"seed": 11, "plan": plan}))
    assert replay_inputs(tmp_path / "journal.json")[1] == 11
    other = next(seed for seed in range(100) if plan_faults(s, seed) != plan_faults(s, 11))
    (tmp_path / "journal.json").write_text(json.dumps({"seed": other, "plan": plan}))
    with pytest.raises(ScenarioError, match="no longer gives the recorded plan"):
        replay_inputs(tmp_path / "journal.json")
