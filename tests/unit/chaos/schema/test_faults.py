"""The fault kinds' own rules: triggers, targets, and what a foreign `command` may take."""

from __future__ import annotations

import pytest

from chaos.faults.plan import Side
from chaos.schema.scenario import ScenarioError, plan_faults


def test_signal_fault_needs_exactly_one_target(make_scenario) -> None:
    with pytest.raises(ScenarioError, match="exactly one target"):
        make_scenario(faults=[{"type": "sigterm", "rank": 1, "target": "all", "at_step": 3}])
    with pytest.raises(ScenarioError, match=r"faults\[0\].ranks: 2 is outside"):
        make_scenario(faults=[{"type": "sigkill", "ranks": [0, 2], "at_step": 3}])
    s = make_scenario(faults=[{"type": "sigterm", "target": "launcher", "after_s": 1, "grace_s": 2}])
    assert s.faults[0].grace_s == 2


def test_load_faults_take_no_trigger_and_a_later_attempt(make_scenario) -> None:
    with pytest.raises(ScenarioError, match="attempt must be 1 or more"):
        make_scenario(faults=[{"type": "checkpoint_corrupt"}])
    with pytest.raises(ScenarioError, match="leave out at_step"):
        make_scenario(faults=[{"type": "fault_during_checkpoint", "during": "load", "rank": 0, "at_step": 3, "attempt": 1}])
    with pytest.raises(ScenarioError, match="not a checkpoint step"):
        make_scenario(faults=[{"type": "fault_during_checkpoint", "rank": 0, "at_step": 7}])
    with pytest.raises(ScenarioError, match="give at_step"):
        make_scenario(faults=[{"type": "collective_hang", "rank": 0, "after_s": 1}])


def test_command_scenarios_take_signal_faults_and_a_step_group(make_scenario) -> None:
    cmd = {"command": ["python", "x.py"], "trainer": {}}
    with pytest.raises(ScenarioError, match="signal faults only"):
        make_scenario(**cmd, faults=[{"type": "rank_killed", "rank": 0, "at_step": 2}])
    with pytest.raises(ScenarioError, match="named group"):
        make_scenario(**cmd, step_pattern=r"step (\d+)")
    with pytest.raises(ScenarioError, match="step_pattern: required"):
        make_scenario(**cmd, faults=[{"type": "sigkill", "rank": 0, "at_step": 2}])


def test_a_command_handed_the_plan_takes_the_faults_with_a_seam_only(make_scenario) -> None:
    cmd = {"command": ["python", "x.py"], "trainer": {}, "requires": "gpu", "step_pattern": r"step (?P<step>\d+)"}
    oom = [{"type": "gpu_oom", "rank": 0, "at_step": 2}]
    with pytest.raises(ScenarioError, match=r"faults\[0\].type: gpu_oom fires inside a rank: the `command` must be handed the plan"):
        make_scenario(**cmd, faults=oom)
    handed = {**cmd, "command": ["python", "x.py", "--chaos-plan={run_dir}/plan.json"]}
    s = make_scenario(**handed, faults=oom)
    assert s.planned(s.faults[0]).side is Side.RANK
    with pytest.raises(ScenarioError, match="signal faults only"):
        make_scenario(**handed, faults=[{"type": "exception", "rank": 0, "at_step": 2, "message": "x"}])


LOCAL = {
    "train.train_iters": 12, "checkpoint.save_interval": 5, "checkpoint.non_persistent_ckpt_type": "local",
    "checkpoint.non_persistent_save_interval": 2,
}


def test_local_checkpoint_faults_and_steps_are_checked_against_the_local_interval(make_scenario) -> None:
    s = make_scenario(trainer=LOCAL, faults=[{"type": "fault_during_checkpoint", "during": "local_save", "rank": 1, "at_step": 8},
                                             {"type": "local_checkpoint_lost", "rank": 0, "attempt": 1}],
                      expect={"resumed_from_step": 6})
    assert [f.type for f in s.faults] == ["fault_during_checkpoint", "local_checkpoint_lost"]
    assert make_scenario(trainer=LOCAL, expect={"resumed_from_step": 5}).expect.resumed_from_step == 5
    with pytest.raises(ScenarioError, match="at_step: 10 is not a local checkpoint step .*a persistent save step saves no local one"):
        make_scenario(trainer=LOCAL, faults=[{"type": "fault_during_checkpoint", "during": "local_save", "rank": 1, "at_step": 10}])
    with pytest.raises(ScenarioError, match="resumed_from_step: 7 is not a local checkpoint step"):
        make_scenario(trainer=LOCAL, expect={"resumed_from_step": 7})
    with pytest.raises(ScenarioError, match="the trainer saves no local checkpoints"):
        make_scenario(faults=[{"type": "fault_during_checkpoint", "during": "local_save", "rank": 1, "at_step": 4}])
    with pytest.raises(ScenarioError, match="local_checkpoint_lost fires at the checkpoint load"):
        make_scenario(trainer=LOCAL, faults=[{"type": "local_checkpoint_lost", "rank": 0, "at_step": 3}])


def test_the_runner_sets_the_local_checkpoint_folder(make_scenario) -> None:
    with pytest.raises(ScenarioError, match="non_persistent_local_ckpt_dir: set by the runner"):
        make_scenario(trainer={**LOCAL, "checkpoint.non_persistent_local_ckpt_dir": "/tmp/x"})
    assert "checkpoint.non_persistent_local_ckpt_dir=R/local" in make_scenario(trainer=LOCAL).trainer_overrides("R")


def test_a_signal_fault_may_go_to_each_targets_process_group(make_scenario) -> None:
    (fault,) = plan_faults(make_scenario(faults=[{"type": "sigterm", "target": "all", "process_group": True, "at_step": 3}]), 0)
    assert fault.process_group is True
    (fault,) = plan_faults(make_scenario(faults=[{"type": "sigkill", "rank": 1, "at_step": 3}]), 0)
    assert fault.process_group is False


def test_an_adapter_reads_a_commands_steps_and_names_no_code(make_scenario) -> None:
    cmd = {"command": ["python", "drivers/megatron_lm.py"], "trainer": {}}
    s = make_scenario(**cmd, adapter="megatron", faults=[{"type": "sigkill", "rank": 0, "at_step": 2}],
                      expect={"resumed_from_step": 30, "lost_steps": {"min": 500}})
    assert s.adapter == "megatron", "the command's own checkpoints, not the trainer config's, bound the resume"
    with pytest.raises(ScenarioError, match="adapter: give it or step_pattern, not both"):
        make_scenario(**cmd, adapter="megatron", step_pattern=r"(?P<step>\d+)")
    with pytest.raises(ScenarioError, match="adapter: only for a `command`"):
        make_scenario(adapter="megatron")
    with pytest.raises(ScenarioError, match="adapter: must be 'megatron'"):
        make_scenario(**cmd, adapter="deepspeed")
    with pytest.raises(ScenarioError, match="needs\\[0\\]: must be 'megatron-core', 'megatron-bridge' or 'transformer-engine'"):
        make_scenario(**cmd, adapter="megatron", needs=["apex"])


def test_a_known_failure_names_verdicts_the_scenario_has(make_scenario) -> None:
    known = {"reason": "upstream", "verdicts": ["exit_code", "processes_reaped"], "signature": "assert len(steps) == 1"}
    assert make_scenario(expect={"exit_code": 0}, known_failure=known).known_failure.verdicts == ["exit_code", "processes_reaped"]
    with pytest.raises(ScenarioError, match="known_failure.verdicts\\[0\\]: 'restarts' is not an expectation this scenario sets"):
        make_scenario(known_failure={**known, "verdicts": ["restarts"]})
    with pytest.raises(ScenarioError, match="known_failure.verdicts: "):
        make_scenario(expect={"exit_code": 0}, known_failure={**known, "verdicts": []})


@pytest.mark.parametrize("fault", [{"type": "exception", "rank": 1, "after_s": 3},
                                   {"type": "slow_rank", "rank": 0, "after_s": 2, "factor": 3}])
def test_a_fault_that_acts_inside_a_step_is_refused_a_timer(make_scenario, fault) -> None:
    """They accepted after_s and then raised NotImplementedError in the rank: refused at validation now."""
    with pytest.raises(ScenarioError, match=f"faults\\[0\\]: {fault['type']} fires at a step: give at_step"):
        make_scenario(faults=[fault])
