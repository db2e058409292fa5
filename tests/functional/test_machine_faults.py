"""What the storage and memory faults change on the machine is undone whatever the run's end: a runner
SIGKILLed while its storage server is stopped and its memory cgroup exists leaves no process (the stopped
server included), no cgroup and no mount; bad input (a NIC fault's too) is refused with one line before
anything starts."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.supervise import cgroup
from chaos.supervise.machine import lacks
from chaos.supervise.storage import mounts_outside
from tests.functional.test_boundaries import (
    chaos,
    chaos_env,
    one_line_error,
    run_processes,
    wait_for,
    write_scenario,
)

MISSING = lacks({"storage_stall", "host_oom"})


@pytest.mark.slow
@pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
def test_a_sigkilled_runner_leaves_no_stopped_server_cgroup_or_mount(tmp_path: Path) -> None:
    trainer = {"train.train_iters": 100000, "checkpoint.save_interval": 5, "ft.enable_ft_package": True}
    faults = [{"type": "storage_stall", "rank": 0, "at_step": 5, "stall_s": 300},
              {"type": "host_oom", "rank": 1, "at_step": 99999}]
    path = write_scenario(tmp_path, "machine_reap", launcher="ft_launcher", trainer=trainer, faults=faults,
                          deadline_s=600, ft={"rank_heartbeat_timeout": 500, "initial_rank_heartbeat_timeout": 500},
                          expect={"exit_code": 0})
    out = tmp_path / "runs"
    runner = subprocess.Popen([sys.executable, "-m", "chaos", "run", str(path), "--out", str(out)], cwd=tmp_path,
                              env=chaos_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run_dir = wait_for(lambda: next(out.glob("machine_reap-*"), None), 60, "the run folder")
        stalled = run_dir / "events" / "storage.jsonl"
        wait_for(lambda: stalled.exists() and "SIGSTOP" in stalled.read_text(), 120, "the storage server stopped")
        assert cgroup.of_run(run_dir.name), "the run's memory cgroup exists while it runs"
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=10)
        wait_for(lambda: not run_processes(run_dir.name), 10, "the run's processes (the stopped server too) to go")
        wait_for(lambda: not cgroup.of_run(run_dir.name), 10, "the watchdog to remove the run's cgroup")
        assert mounts_outside(run_dir) == []
        assert not list((run_dir / "checkpoints").iterdir()), "the FUSE mount and its store were the namespace's only"
    finally:
        runner.kill()
        for pid in run_processes(run_dir.name) if "run_dir" in locals() else ():
            subprocess.run(["kill", "-9", str(pid)], check=False)
        cgroup.remove_run(run_dir.name) if "run_dir" in locals() else None


@pytest.mark.parametrize(("fault", "field"), [
    ({"type": "disk_full", "at_step": 5, "disk_bytes": 70000}, "faults[0].disk_bytes"),
    ({"type": "storage_stall", "at_step": 5, "stall_s": 500}, "faults[0].stall_s"),
    ({"type": "nic_link_down", "at_step": 5, "nic": 2}, "faults[0]: nic: 2 is not one of the 2 NICs"),
])
def test_bad_storage_input_is_one_line_before_launch(tmp_path: Path, fault: dict, field: str) -> None:
    path = write_scenario(tmp_path, "bad", trainer={"train.train_iters": 10, "checkpoint.save_interval": 5}, faults=[fault])
    started = time.monotonic()
    one_line_error(chaos("run", str(path), "--out", str(tmp_path / "runs"), cwd=tmp_path), field)
    assert time.monotonic() - started < 30 and not (tmp_path / "runs").exists()
