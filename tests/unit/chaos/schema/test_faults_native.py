"""The native faults' rules: a crash at a step or after a delay, a GIL deadlock in the main thread at a step."""

from __future__ import annotations

import pytest

from chaos.faults.gpu.planned import GpuOom
from chaos.faults.native.planned import Abort, GilDeadlock, Segfault
from chaos.schema.scenario import ScenarioError, plan_faults


def test_a_native_crash_fires_at_a_step_or_after_a_delay(make_scenario) -> None:
    (seg, abort) = plan_faults(make_scenario(faults=[{"type": "segfault", "rank": 1, "at_step": 3},
                                                     {"type": "abort", "rank": 0, "after_s": 1}]), 0)
    assert isinstance(seg, Segfault) and (seg.rank, seg.at_step) == (1, 3)
    assert isinstance(abort, Abort) and abort.delay_s is not None


def test_a_gil_deadlock_takes_a_step_and_a_rank(make_scenario) -> None:
    (lock,) = plan_faults(make_scenario(faults=[{"type": "gil_deadlock", "rank": 1, "at_step": 3}]), 0)
    assert isinstance(lock, GilDeadlock)
    with pytest.raises(ScenarioError, match=r"^t.yaml: faults\[0\]: gil_deadlock fires at a step: give at_step \(not after_s\)$"):
        make_scenario(faults=[{"type": "gil_deadlock", "rank": 1, "after_s": 1}])
    with pytest.raises(ScenarioError, match=r"^t.yaml: faults\[0\]\.rank: required for segfault"):
        make_scenario(faults=[{"type": "segfault", "at_step": 3}])


def test_a_gpu_oom_needs_a_gpu_scenario_and_a_step(make_scenario) -> None:
    (oom,) = plan_faults(make_scenario(requires="gpu", faults=[{"type": "gpu_oom", "rank": 0, "at_step": 3}]), 0)
    assert isinstance(oom, GpuOom)
    with pytest.raises(ScenarioError, match=r"^t.yaml: faults\[0\]\.type: gpu_oom needs requires: gpu \(the scenario says any\)$"):
        make_scenario(faults=[{"type": "gpu_oom", "rank": 0, "at_step": 3}])
    with pytest.raises(ScenarioError, match=r"faults\[0\]: gpu_oom fires at a step"):
        make_scenario(requires="gpu", faults=[{"type": "gpu_oom", "rank": 0, "after_s": 1}])
