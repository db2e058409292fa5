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
