"""A fault fired from outside the ranks strikes at its step, however slow the runner is to find its targets.

On a loaded 2-core machine the runner took 1.3 s from reading node_killed_hot_spare's trigger step to the
strike, in which the ranks ran on to their end (docs/records/2026-12-02-functional-suite.md). Here the runner's /proc scan is made
that slow on purpose, on a real launcher and a real trainer whose steps take milliseconds: before the ranks
waited at the fault's step, the run finished first and the SIGTERM found nobody.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from chaos.schema.loader import parse_scenario
from chaos.supervise import signals
from chaos.supervise.runner import execute
from runlog import names
from runlog.reader import read_events

SLOW_SCAN_S = 1.5
"""Longer than the whole run takes after its trigger step, shorter than the ranks' wait (HOLD_S, 2 s)."""


def test_a_runner_fault_strikes_at_its_step_when_the_runner_is_slow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = parse_scenario({
        "schema_version": 1, "name": "slow_runner", "description": "SIGTERM at step 3, found slowly",
        "world_size": 1, "launcher": "torchrun", "deadline_s": 90,
        "trainer": {"train.train_iters": 60, "checkpoint.save_interval": 1000, "train.exit_signal_handler": True},
        "faults": [{"type": "sigterm", "target": "all", "at_step": 3, "grace_s": 20}],
        "expect": {"exit_code": 0},
    }, "slow_runner")
    real_scan = signals.worker_pids

    def slow_scan(*args, **kwargs):
        time.sleep(SLOW_SCAN_S)
        return real_scan(*args, **kwargs)

    monkeypatch.setattr(signals, "worker_pids", slow_scan)
    result = execute(scenario, tmp_path, scenario.seed, progress=None)

    assert (result.exit_code, result.timed_out, result.leftovers) == (0, False, [])
    events = read_events(tmp_path)
    injected = [e for e in events if e["event"] == names.FAULT_INJECTED]
    assert [(e["fault_id"], e["iteration"]) for e in injected] == [("f0", 3)]
    assert max(e["iteration"] for e in events if e["event"] == names.STEP) == 3
    (end,) = [e for e in events if e["event"] == names.EXIT]
    assert (end["reason"], end["iteration"]) == ("signal", 3)
    assert [e["iteration"] for e in events if e["event"] == names.CHECKPOINT_SAVE_END] == [3]
