"""The stall file system: the run's checkpoints through a real FUSE server in a private mount namespace, whose
stop blocks real system calls until its keeper resumes it; the server and keeper die with the agent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.supervise.machine import lacks
from chaos.supervise.storage import RunStorage, mounts_outside

MISSING = lacks({"storage_stall"})
pytestmark = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))

AGENT = r"""
pid=${CHAOS_STALLFS%%:*}; fifo=${CHAOS_STALLFS#*:}
echo a > "$1/a"
kill -STOP "$pid"; echo "1.5 0" > "$fifo"
t0=$(date +%s%N); echo b > "$1/b"; t1=$(date +%s%N)
echo "blocked_ms=$(( (t1 - t0) / 1000000 )) server=$pid"
"""


def test_a_stopped_server_blocks_the_write_until_its_keeper_resumes_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    store, checkpoints = run_dir / "store", run_dir / "checkpoints"
    store.mkdir()
    checkpoints.mkdir()
    wrapper = [sys.executable, "-m", "chaos.supervise.stallfs", str(run_dir), str(store), str(checkpoints), "--"]
    script = f"mount -t tmpfs -o size=4m t {store} && exec {' '.join(wrapper)} sh -c '{AGENT}' sh {checkpoints}"
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parents[4])}
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=30, env=env)
    assert done.returncode == 0, done.stderr
    fields = dict(item.split("=") for item in done.stdout.split())
    assert 1400 <= int(fields["blocked_ms"]) < 5000, "the write waited for the resume"
    signals = [json.loads(line)["signal"] for line in (run_dir / "events" / "storage.jsonl").read_text().splitlines()]
    assert signals == ["SIGSTOP", "SIGCONT"]
    assert not Path(f"/proc/{fields['server']}").exists() or "stallfs" not in Path(f"/proc/{fields['server']}/cmdline").read_text()
    assert mounts_outside(run_dir) == [] and list(checkpoints.iterdir()) == [], "nothing of it outside the namespace"


def test_the_storage_a_plan_asks_for(make_scenario, tmp_path: Path) -> None:
    from chaos.schema.scenario import plan_faults

    full = RunStorage.of(plan_faults(make_scenario(faults=[{"type": "disk_full", "at_step": 10, "disk_bytes": 4 << 20}]), 0), tmp_path)
    assert full == RunStorage({tmp_path / "checkpoints": 4 << 20})
    stall = RunStorage.of(plan_faults(make_scenario(faults=[{"type": "storage_stall", "at_step": 5, "stall_s": 1}]), 0), tmp_path)
    assert stall.tmpfs == {tmp_path / ".checkpoint-store": 64 << 20}
    assert stall.command(["ft_launcher"])[-5:] == [str(tmp_path), str(tmp_path / ".checkpoint-store"),
                                                   str(tmp_path / "checkpoints"), "--", "ft_launcher"]
    assert all(folder.is_dir() for folder in (*full.tmpfs, *stall.tmpfs, tmp_path / "checkpoints"))
    assert RunStorage.of([], tmp_path) == RunStorage()
