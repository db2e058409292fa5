"""`python -m benchmarks forecast`: its speed section runs, and a soak's realised fault times are read as the
model's gaps (the replay's input), from real event files written by the real writer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.__main__ import main
from benchmarks.forecast import realised
from runlog.records import CheckpointLoad, FaultInjected, Step


def test_the_speed_section_writes_its_figures(tmp_path: Path) -> None:
    assert main(["forecast", "--speed-only", "--out", str(tmp_path)]) == 0
    speed = json.loads((tmp_path / "forecast.json").read_text())["speed"]
    assert set(speed) == {"replicas_100_wall_s", "replicas_100_cpu_s", "replicas_1000_wall_s", "replicas_1000_cpu_s"}


def test_a_gap_runs_from_the_attempt_s_training_start_and_counts_the_load(run_logs) -> None:
    r0 = run_logs.rank(0, attempt=0)
    r0.write(Step(1, 5.0, 0.1, 0.5, 8), at=(0.0, 10.5))  # a 0.5 s step: training started at 10.0
    r0.write(FaultInjected("soak", "f0.0", "rank_killed after 3.00s", 6, target_rank=0), at=(0.0, 13.0))
    r1 = run_logs.rank(0, attempt=1)
    r1.write(CheckpointLoad(5, "ckpt", 0.25), at=(0.0, 30.0))
    r1.write(Step(6, 5.0, 0.1, 0.5, 48), at=(0.0, 30.5))
    r1.write(FaultInjected("soak", "f0.1", "rank_hung after 2.00s", 7, target_rank=0), at=(0.0, 32.0))
    run_logs.close()
    plan = [{"fault_id": "f0.0", "type": "soak", "kind": "rank_killed"}, {"fault_id": "f0.1", "type": "soak", "kind": "rank_hung"}]
    gaps, classes = realised(run_logs.root, plan)
    assert gaps == pytest.approx([3.0, 2.0 + 0.25])
    assert classes == ["process_death", "hang"]
