"""The model against cases whose answer is known in closed form."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from chaos.forecast.model import Arrivals, Costs, simulate, young_daly_s
from chaos.forecast.profile import CLASSES


def costs(step=1.0, overhead=0.0, startup=0.0, interval=10, stall=0.0, detect=0.0, restart=0.0, load=0.0, loses=True) -> Costs:
    n = len(CLASSES)
    return Costs(step, overhead, startup, interval, stall, np.full(n, detect), np.full(n, restart), np.full(n, load),
                 np.full(n, loses))


def test_without_failures_goodput_is_one_less_the_save_stall_share() -> None:
    c = costs(step=1.0, interval=10, stall=2.0)
    out = simulate(c, Arrivals.poisson({}), horizon_s=120_000.0, replicas=3)
    assert out.band()["mean"] == pytest.approx(10 / 12, abs=1e-3)
    assert out.failures.sum() == 0
    assert out.badput_share()["UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"] == pytest.approx(2 / 12, abs=1e-3)


def test_a_job_of_so_many_steps_takes_its_steps_saves_and_startup() -> None:
    c = costs(step=0.5, overhead=0.1, startup=7.0, interval=4, stall=1.0)
    out = simulate(c, Arrivals.poisson({}), work_steps=10, replicas=1)
    wall = 7.0 + 10 * 0.6 + 2 * 1.0  # saves after steps 4 and 8
    assert out.wall_s[0] == pytest.approx(wall)
    assert out.goodput[0] == pytest.approx(10 * 0.5 / wall)


def test_crashes_cost_their_downtime_as_renewal_theory_says() -> None:
    """Every step saved at no cost: a failure loses at most a part-step; goodput = uptime / (uptime + downtime)."""
    c = costs(step=0.01, interval=1, restart=10.0)
    out = simulate(c, Arrivals.poisson({"process_death": 1 / 100}), horizon_s=2e6, replicas=200, seed=1)
    assert out.band()["mean"] == pytest.approx(100 / 110, abs=3e-3)


def test_lost_work_is_the_progress_since_the_last_save() -> None:
    """Interval T = 20 s, MTBF 1000 s: the mean loss per failure is E[g mod T] for an exponential gap g."""
    lam, T = 1 / 1000, 20.0
    lost = 1 / lam - T * math.exp(-lam * T) / (1 - math.exp(-lam * T))
    c = costs(step=1.0, interval=20, restart=5.0)
    out = simulate(c, Arrivals.poisson({"hang": lam}), horizon_s=5e6, replicas=100, seed=2)
    assert out.band()["mean"] == pytest.approx((1 / lam - lost) / (1 / lam + 5.0), abs=3e-3)
    assert out.badput_share()["WASTED_PROGRESS_FROM_DISRUPTION"] == pytest.approx(lost / (1 / lam + 5.0), abs=2e-3)


def test_a_class_that_saves_on_the_fault_loses_nothing_but_a_save() -> None:
    c = costs(step=0.01, interval=100_000, stall=1.0, restart=9.0, loses=False)
    out = simulate(c, Arrivals.poisson({"preemption": 1 / 100}), horizon_s=2e6, replicas=100, seed=3)
    assert out.band()["mean"] == pytest.approx(100 / 110, abs=3e-3)


def test_a_replay_meets_exactly_the_failures_it_is_given() -> None:
    c = costs(step=1.0, interval=5, stall=0.0, detect=2.0, restart=3.0, load=1.0)
    out = simulate(c, Arrivals.replay([7.5, 4.0], ["process_death", "hang"]), work_steps=20)
    # attempt 1: 7 steps (saved at 5), fails at 7.5; attempt 2: load 1, 3 steps (none saved), fails at 4.0;
    # attempt 3: load 1, 15 steps from 5.
    assert out.failures[0] == 2
    assert out.wall_s[0] == pytest.approx(7.5 + 5 + 4.0 + 5 + 1 + 15)
    assert out.goodput[0] == pytest.approx(20 / out.wall_s[0])


def test_the_same_seed_gives_the_same_forecast() -> None:
    c = costs(interval=10, stall=1.0, restart=10.0)
    a = simulate(c, Arrivals.poisson({"process_death": 1e-3}), horizon_s=1e6, replicas=50, seed=9)
    b = simulate(c, Arrivals.poisson({"process_death": 1e-3}), horizon_s=1e6, replicas=50, seed=9)
    assert np.array_equal(a.goodput, b.goodput)


def test_a_negative_rate_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        Arrivals.poisson({"hang": -1.0})


def test_young_daly() -> None:
    assert young_daly_s(3600.0, 50.0) == pytest.approx(600.0)


def test_a_soak_s_failures_stop_when_the_attempts_clock_passes_its_duration() -> None:
    """The soak's process: a Poisson count of mean duration / MTBF, then none; and a job of so many steps ends
    with its shutdown."""
    c = replace(costs(step=0.01, interval=100, restart=5.0), shutdown_s=2.0)
    out = simulate(c, Arrivals.poisson({"process_death": 1 / 10}, until_s=100.0), work_steps=100_000, replicas=2000, seed=4)
    assert out.failures.mean() == pytest.approx(10, rel=0.05)
    assert out.failures.var() == pytest.approx(10, rel=0.15)
    assert out.badput_share()["OTHER"] > 0
