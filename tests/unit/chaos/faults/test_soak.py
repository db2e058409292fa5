"""The soak's plan: a Poisson process drawn from the seed, one fault per attempt, replayable."""

from __future__ import annotations

import statistics

import pytest

from chaos.faults.soak.planned import SoakFault
from chaos.schema.scenario import ScenarioError, plan_faults


def soak(make_scenario, **fields):
    fault = {"type": "soak", "mtbf_s": 10, "duration_s": 100, "count": 40, **fields}
    return make_scenario(faults=[fault], max_restarts=fault["count"])


def test_the_same_seed_plans_the_same_soak_and_another_seed_another(make_scenario) -> None:
    s = soak(make_scenario)
    assert plan_faults(s, 4) == plan_faults(s, 4)
    assert plan_faults(s, 4) != plan_faults(s, 5)


def test_fault_j_strikes_in_attempt_j_after_its_gap_as_a_kind_it_mixes(make_scenario) -> None:
    plan = plan_faults(soak(make_scenario, kinds=["rank_hung"], rank=1), 0)
    assert all(isinstance(f, SoakFault) for f in plan)
    assert [f.attempt for f in plan] == list(range(len(plan)))
    assert {(f.kind, f.rank, f.at_step) for f in plan} == {("rank_hung", 1, None)}
    assert sum(f.delay_s for f in plan) <= 100  # the gap that passed duration_s is not planned


def test_gaps_are_exponential_and_the_count_poisson(make_scenario) -> None:
    uncut = soak(make_scenario, duration_s=1e9)  # every plan its 40 gaps
    gaps = [f.delay_s for seed in range(100) for f in plan_faults(uncut, seed)]
    assert statistics.mean(gaps) == pytest.approx(10, rel=0.1)
    assert statistics.stdev(gaps) == pytest.approx(10, rel=0.15)  # an exponential's sd is its mean
    counts = [len(plan_faults(soak(make_scenario), seed)) for seed in range(400)]
    assert statistics.mean(counts) == pytest.approx(10, rel=0.1)
    assert statistics.variance(counts) == pytest.approx(10, rel=0.3)  # a Poisson's variance is its mean


def test_a_soak_needs_restarts_for_its_faults_and_no_trigger(make_scenario) -> None:
    with pytest.raises(ScenarioError, match=r"faults\[0\]\.attempt: 39 is past the run's last attempt"):
        make_scenario(faults=[{"type": "soak", "mtbf_s": 10, "duration_s": 100, "count": 40}], max_restarts=3)
    with pytest.raises(ScenarioError, match="soak draws its own triggers"):
        soak(make_scenario, at_step=3)


def test_the_benchmark_s_long_soak_plans_at_least_eight_faults_it_can_restart_from() -> None:
    from pathlib import Path

    from chaos.schema.loader import load_scenario

    s = load_scenario(Path(__file__).resolve().parents[4] / "scenarios" / "soak" / "soak_long.yaml")
    plan = plan_faults(s, s.seed)
    assert 8 <= len(plan) <= s.max_restarts
