"""NeMo-Run's FaultTolerancePlugin and PreemptionPlugin in a scenario, mapped as Megatron Bridge's
recipes/run_plugins.py maps them: launcher options, job retries, the trainer's overrides and the
preemption signal; the launch they produce carries them."""

from __future__ import annotations

import pytest
import yaml

from chaos.faults.signals.planned import Sigterm
from chaos.schema.plugins import FaultTolerancePlugin, PreemptionPlugin
from chaos.schema.scenario import ScenarioError, plan_faults
from chaos.supervise.runner import launcher_command
from runlog.layout import RunFolder

FT = {"num_in_job_restarts": 1, "num_job_retries_on_failure": 2, "initial_rank_heartbeat_timeout": 60, "rank_heartbeat_timeout": 7}


def test_the_plugins_defaults_are_bridges():
    assert FaultTolerancePlugin().model_dump() == {
        "enable_ft_package": True, "calc_ft_timeouts": True, "num_in_job_restarts": 3, "num_job_retries_on_failure": 2,
        "initial_rank_heartbeat_timeout": 1800, "rank_heartbeat_timeout": 300,
    }
    assert PreemptionPlugin().model_dump() == {"preempt_time": 60, "enable_exit_handler": True, "enable_exit_handler_for_data_loader": False}


def test_fault_tolerance_plugin_is_ft_launcher_its_restarts_job_retries_and_the_ft_overrides(make_scenario, tmp_path):
    s = make_scenario(plugins={"fault_tolerance": {**FT, "calc_ft_timeouts": False}})
    assert (s.launcher, s.max_restarts, s.job_retries) == ("ft_launcher", 1, 2)
    assert (s.ft.initial_rank_heartbeat_timeout, s.ft.rank_heartbeat_timeout) == (60, 7)
    assert (s.config.ft.enable_ft_package, s.config.ft.calc_ft_timeouts) == (True, False)
    assert s.last_attempt()[0] == 2 * 3 - 1, "two launcher rounds in each of three launches"
    command = launcher_command(s, tmp_path, 29500, s.trainer_overrides(tmp_path))
    assert "--max-restarts=1" in command and "ft.enable_ft_package=true" in command
    written = yaml.safe_load(RunFolder(tmp_path).ft_config.read_text())["fault_tolerance"]
    assert (written["initial_rank_heartbeat_timeout"], written["rank_heartbeat_timeout"]) == (60, 7)


def test_preemption_plugin_is_the_exit_handlers_and_a_sigterm_preempt_time_before_the_time_limit(make_scenario):
    s = make_scenario(deadline_s=90, plugins={"preemption": {"preempt_time": 30, "enable_exit_handler_for_data_loader": True}})
    assert s.trainer["train.exit_signal_handler"] is True and s.config.train.exit_signal_handler_for_dataloader
    (signal,) = plan_faults(s, seed=3)
    assert isinstance(signal, Sigterm)
    assert (signal.delay_s, signal.grace_s, signal.target, signal.process_group, signal.attempt) == (60, 30, "all", True, 0)
    assert plan_faults(s, seed=4) == [signal], "Slurm's signal time has no jitter"


def test_preemption_plugin_without_the_exit_handler_sets_no_overrides_as_bridge(make_scenario):
    s = make_scenario(plugins={"preemption": {"enable_exit_handler": False, "enable_exit_handler_for_data_loader": True}})
    assert "train.exit_signal_handler" not in s.trainer and not s.config.train.exit_signal_handler_for_dataloader


def test_a_scenario_with_plugins_validates_again_unchanged(make_scenario):
    s = make_scenario(plugins={"fault_tolerance": FT, "preemption": {"preempt_time": 30}})
    assert s.replace(seed=9).model_dump() == {**s.model_dump(), "seed": 9}


@pytest.mark.parametrize(("field", "value", "where"), [
    ("max_restarts", 5, "max_restarts"),
    ("launcher", "torchrun", "launcher"),
    ("ft", {"rank_heartbeat_timeout": 3}, "ft.rank_heartbeat_timeout"),
    ("trainer", {"train.train_iters": 20, "ft.enable_ft_package": False}, "trainer.ft.enable_ft_package"),
])
def test_a_field_the_plugin_sets_otherwise_is_an_error_naming_both(make_scenario, field, value, where):
    with pytest.raises(ScenarioError, match=f"{where}: .* conflicts with plugins"):
        make_scenario(plugins={"fault_tolerance": FT}, **{field: value})


def test_preempt_time_must_fall_before_the_time_limit(make_scenario):
    with pytest.raises(ScenarioError, match="preempt_time: 60 s is not before deadline_s"):
        make_scenario(deadline_s=60, plugins={"preemption": {}})
    with pytest.raises(ScenarioError, match="plugins.fault_tolerance.num_in_job_restarts"):
        make_scenario(plugins={"fault_tolerance": {"num_in_job_restarts": -1}})
