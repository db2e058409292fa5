"""Repeats (the spread of a metric over runs) and replays (the journal's plan, checked before a launch)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from chaos.repeat import replay_inputs, spread
from chaos.schema.scenario import ScenarioError, plan_faults
from runlog.layout import RunFolder


def test_spread_takes_numbers_only() -> None:
    journals = [{"metrics": {"lost_steps": v, "time_to_detect_s": None}} for v in (3, 1, 2)]
    s = spread(journals)
    assert (s["lost_steps"].min, s["lost_steps"].median, s["lost_steps"].max, s["lost_steps"].n) == (1, 2, 3, 3)
    assert "time_to_detect_s" not in s


def test_replay_refuses_a_journal_whose_plan_differs(make_scenario, tmp_path: Path) -> None:
    s = make_scenario(faults=[{"type": "random", "at_step": 4}])
    folder = RunFolder(tmp_path)
    folder.scenario.write_text(yaml.safe_dump(s.model_dump(mode="json")))
    plan = [p.to_json() for p in plan_faults(s, 11)]
    folder.journal.write_text(json.dumps({"seed": 11, "plan": plan}))
    assert replay_inputs(folder.journal)[1] == 11
    other = next(seed for seed in range(100) if plan_faults(s, seed) != plan_faults(s, 11))
    folder.journal.write_text(json.dumps({"seed": other, "plan": plan}))
    with pytest.raises(ScenarioError, match="no longer gives the recorded plan"):
        replay_inputs(folder.journal)
