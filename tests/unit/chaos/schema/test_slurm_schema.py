"""The Slurm parts of a scenario: requires: slurm, the slurm: options, Slurm's faults and expectations."""

from __future__ import annotations

import pytest

from chaos.faults.slurm.planned import SlurmKillStep, SlurmRequeue
from chaos.schema.scenario import ScenarioError, plan_faults


@pytest.mark.parametrize(("fields", "problem"), [
    ({"faults": [{"type": "slurm_requeue", "at_step": 3}]}, "faults[0].type: slurm_requeue is delivered by Slurm: set requires: slurm"),
    ({"slurm": {"job_retries": 1}}, "slurm: options of a Slurm job: set requires: slurm"),
    ({"expect": {"slurm_job_state": "COMPLETED"}}, "expect.slurm_job_state: recorded by Slurm: set requires: slurm"),
    ({"requires": "slurm", "slurm": {"preempt_time_s": 60}}, "slurm: preempt_time_s: the signal comes before the time limit"),
    ({"requires": "slurm", "slurm": {"preempt_time_s": 120, "time_limit_min": 2}}, "120 is not before the time limit (2 min)"),
    ({"requires": "slurm", "faults": [{"type": "slurm_kill_step", "rank": 1, "at_step": 3}]}, "acts on the whole job, not a rank"),
    ({"requires": "slurm", "faults": [{"type": "slurm_kill_step", "attempt": 4, "at_step": 3}]}, "past the run's last attempt (3: max_restarts 3)"),
    ({"requires": "slurm", "relaunch": True}, "requires: slurm: a Slurm job runs this project's trainer, without command or relaunch"),
    ({"requires": "slurm", "command": ["python", "x.py"], "trainer": {}}, "without command or relaunch"),
])
def test_slurm_parts_of_a_scenario_are_checked(make_scenario, fields: dict, problem: str) -> None:
    with pytest.raises(ScenarioError) as raised:
        make_scenario(**fields)
    assert problem in str(raised.value)


def test_each_requeue_adds_a_job_launch_of_attempts(make_scenario) -> None:
    s = make_scenario(requires="slurm", max_restarts=1, slurm={"job_retries": 2},
                      faults=[{"type": "slurm_requeue", "attempt": 7, "at_step": 3}])
    assert s.last_attempt() == (7, "max_restarts 1, 3 Slurm requeue(s)")


def test_slurm_faults_plan_as_the_commands_slurm_runs(make_scenario) -> None:
    s = make_scenario(requires="slurm", slurm={"job_retries": 1},
                      faults=[{"type": "slurm_kill_step", "at_step": 3}, {"type": "slurm_requeue", "attempt": 1, "after_s": 2}])
    kill, requeue = plan_faults(s, 0)
    assert isinstance(kill, SlurmKillStep) and isinstance(requeue, SlurmRequeue)
    assert (kill.rank, kill.at_step, requeue.attempt, kill.to_json()["type"]) == (None, 3, 1, "slurm_kill_step")

    class Job:
        job_id = "7"

        def running_step(self) -> str:
            return "7.0"

    assert (kill.argv(Job()), requeue.argv(Job())) == (["scancel", "--signal=KILL", "7.0"], ["scontrol", "requeue", "7"])
