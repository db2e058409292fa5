"""The step seam a driver hands a trainer we did not write: each iteration's faults fire once, before its first
forward pass, and write to the rank's own event file in the plan's folder."""

from __future__ import annotations

import pytest
import torch

from chaos.faults.plan import write_plan
from chaos.hooks.seam import StepSeam
from chaos.schema.scenario import plan_faults
from runlog.reader import read_events
from trainer.components import TrainContext

CTX = TrainContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), backend="gloo", microbatches=8,
                   async_saves=True)


def seam(tmp_path, make_scenario, fault: dict, **scenario) -> StepSeam:
    plan = tmp_path / "plan.json"
    write_plan(plan, plan_faults(make_scenario(faults=[fault], **scenario), seed=0))
    return StepSeam(plan, CTX)


def test_a_fault_strikes_once_at_its_iteration_whatever_the_microbatches(tmp_path, make_scenario) -> None:
    s = seam(tmp_path, make_scenario, {"type": "exception", "rank": 0, "at_step": 3, "message": "boom"}, world_size=1)
    for iteration in (1, 1, 2, 2):
        s.before(iteration)
    with pytest.raises(Exception, match="boom"):
        s.before(3)
    s.before(3)  # the same iteration's next micro-batch: no second strike
    injected = [e for e in read_events(tmp_path) if e["event"] == "fault_injected"]
    assert [(e["fault"], e["iteration"], e["rank"]) for e in injected] == [("exception", 3, 0)]


def test_a_gpu_oom_through_the_seam_on_a_cpu_rank_is_missed_with_its_reason(tmp_path, make_scenario) -> None:
    s = seam(tmp_path, make_scenario, {"type": "gpu_oom", "rank": 0, "at_step": 2}, world_size=1, requires="gpu")
    s.before(2)
    (missed,) = [e for e in read_events(tmp_path) if e["event"] in ("fault_missed", "fault_injected")]
    assert missed["reason"] == "the rank computes on cpu, not a CUDA device"
    assert (tmp_path / "events" / "rank-0.jsonl").is_file()
