"""The one module that knows the installed NVRx: the launcher's config section across versions."""

import pytest

from trainer import nvrx_compat


@pytest.mark.parametrize(("version", "kept"), [((0, 4), False), ((0, 7), True)])
def test_gpu_memory_wait_is_only_configured_where_the_launcher_has_one(monkeypatch, version, kept):
    monkeypatch.setattr(nvrx_compat, "_MAJOR_MINOR", version)
    section = nvrx_compat.ft_config_section({"gpu_memory_reclaim_timeout": 0.0, "rank_heartbeat_timeout": 5.0})
    assert ("gpu_memory_reclaim_timeout" in section["fault_tolerance"]) is kept
    assert section["fault_tolerance"]["rank_heartbeat_timeout"] == 5.0


def test_unset_gpu_memory_wait_leaves_nvrx_its_default(monkeypatch):
    monkeypatch.setattr(nvrx_compat, "_MAJOR_MINOR", (0, 7))
    section = nvrx_compat.ft_config_section({"gpu_memory_reclaim_timeout": None, "rank_section_timeouts": None})
    assert "gpu_memory_reclaim_timeout" not in section["fault_tolerance"]
    assert section["fault_tolerance"]["rank_section_timeouts"] == {}


@pytest.mark.parametrize(("version", "lacking"), [((0, 4), ["max_no_progress_cycles", "cycle_info_dir"]), ((0, 7), [])])
def test_the_0_7_launcher_options_set_are_those_0_4_lacks(monkeypatch, version, lacking):
    monkeypatch.setattr(nvrx_compat, "_MAJOR_MINOR", version)
    options = {"max_no_progress_cycles": 3, "cycle_info_dir": "/r/nvrx", "storage_healthcheck_path": None, "rank_heartbeat_timeout": 5.0}
    assert nvrx_compat.launcher_lacks(options) == lacking


def test_unset_0_7_options_stay_out_of_the_yaml_and_the_exit_code_goes_on_the_command_line(monkeypatch):
    monkeypatch.setattr(nvrx_compat, "_MAJOR_MINOR", (0, 7))
    options = {"max_no_progress_cycles": 3, "cycle_info_dir": None, "no_restart_exit_code": 75, "check_remaining_processes": None}
    section = nvrx_compat.ft_config_section(options)["fault_tolerance"]
    assert section["max_no_progress_cycles"] == 3
    assert not {"cycle_info_dir", "no_restart_exit_code", "check_remaining_processes"} & section.keys()
    assert nvrx_compat.launcher_cli_options(options) == ["--ft-no-restart-exit-code=75"]
    assert nvrx_compat.launcher_cli_options({"no_restart_exit_code": None}) == []
