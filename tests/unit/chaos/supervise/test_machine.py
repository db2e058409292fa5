"""A machine that lacks what a storage or memory fault needs refuses the run (the plugin skips it) with a
reason naming what is missing; the probes themselves are stood in for here (this machine has it all). A mount
the run left on /sys/class is named at its end."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chaos.supervise import cgroup, machine
from chaos.supervise.runner import unrunnable

ROOT = Path(__file__).resolve().parents[4]


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


@pytest.mark.skipif(machine._no_fake_nics() is not None, reason=f"no private mount namespace here: {machine._no_fake_nics()}")
def test_a_mount_on_sys_class_the_run_left_in_the_machines_namespace_is_a_leftover(tmp_path) -> None:
    """The run's /sys/class lives in its launch's namespace; one that reached the namespace the runner is in
    (here a private one of a child, standing in for the machine's) is named at the run's end."""
    code = f"""
        import ctypes, sys
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from runlog.log import EventLog
        from chaos.supervise.machine import RunMachine
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.unshare(0x00020000) == 0 and libc.mount(None, b"/", None, 0x4000 | 0x40000, None) == 0
        run = RunMachine.start([], Path({str(tmp_path)!r}), EventLog({str(tmp_path)!r}, "launcher", rank=-1, attempt=0))
        assert libc.mount(b"tmpfs", b"/sys/class/bdi", b"tmpfs", 0, b"size=4k") == 0
        print(run.close())"""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "['mount /sys/class/bdi']", done.stderr
