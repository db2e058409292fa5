"""A machine that lacks what a storage or memory fault needs refuses the run (the plugin skips it) with a
reason naming what is missing; the probes themselves are stood in for here (this machine has it all)."""

from __future__ import annotations

import pytest

from chaos.supervise import cgroup, machine
from chaos.supervise.runner import unrunnable


@pytest.fixture
def oom_scenario(make_scenario):
    return make_scenario(faults=[{"type": "host_oom", "rank": 1, "at_step": 7}])


def test_no_memory_cgroup_is_a_reason_naming_it(monkeypatch, oom_scenario) -> None:
    monkeypatch.setattr(cgroup, "hierarchy", lambda: "no cgroup memory controller (neither /sys/fs/cgroup/memory nor cgroup v2 with memory)")
    assert unrunnable(oom_scenario, None) == (
        "t: host_oom needs a memory cgroup of the run: no cgroup memory controller "
        "(neither /sys/fs/cgroup/memory nor cgroup v2 with memory)"
    )


def test_no_mount_namespace_or_fuse_is_a_reason_naming_it(monkeypatch, make_scenario) -> None:
    monkeypatch.setattr(machine, "_no_private_tmpfs", lambda: "unshare: Operation not permitted")
    full = make_scenario(faults=[{"type": "disk_full", "at_step": 10}])
    assert unrunnable(full, None) == "t: disk_full needs a private mount namespace with a tmpfs: unshare: Operation not permitted"
    monkeypatch.setattr(machine, "_no_private_tmpfs", lambda: None)
    monkeypatch.setattr(machine, "_no_fuse", lambda: "storage_stall needs FUSE: no /dev/fuse on this machine")
    stall = make_scenario(faults=[{"type": "storage_stall", "at_step": 10, "stall_s": 2}])
    assert unrunnable(stall, None) == "t: storage_stall needs FUSE: no /dev/fuse on this machine"
    assert unrunnable(full, None) is None


def test_this_machine_has_what_they_need_or_says_why() -> None:
    reason = machine.lacks({"disk_full", "storage_stall", "host_oom"})
    assert reason is None or reason.split(":")[0] in {
        "host_oom needs a memory cgroup of the run", "disk_full, storage_stall need a private mount namespace with a tmpfs",
        "storage_stall needs FUSE", "storage_stall needs fusepy (pip install fusepy; a project dependency)",
        "storage_stall needs libfuse 2 (apt-get install libfuse2)",
    }
