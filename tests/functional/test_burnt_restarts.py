"""An earlier attempt's leftovers burn the restarts that follow, as users meet it: `chaos run` of the
catalogue's external_loader_leftovers (a DDP trainer with forked DataLoader workers under ft_launcher, rank 0
SIGKILLed while a worker loads a slow batch). Each new rank 0 dies of EADDRINUSE on the store port the
orphaned workers hold; the run is a known failure (its restarts), each burnt attempt a failed recovery from
the kill naming the port and the processes; judged without its known failure it is a resiliency failure
(exit 1), not a broken run (exit 3). NVRx 0.4.1's launcher only: 0.7's kills the orphaned workers at its
stop, and the catalogue's run of the scenario there checks its one restart (tests/functional/
test_remaining_processes.py shows what 0.7 leaves).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trainer import nvrx_compat

SCENARIO = Path(__file__).parents[2] / "scenarios" / "external_loader_leftovers.yaml"
HELD = re.compile(
    r"failed recovery from f0: attempt (\d+), rank 0, exit code 1: port (\d+) held by \d pt_data_worker process(?:es)? of "
    r"attempt 0 \(left over (\d+\.\d) s after the kill\): torch\.distributed\.DistNetworkError: .*EADDRINUSE"
)


def _chaos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos", *args], capture_output=True, text=True, timeout=400)


@pytest.mark.skipif(not nvrx_compat.launcher_lacks({"check_remaining_processes": True}),
                    reason=f"NVRx {nvrx_compat.VERSION}'s launcher kills a dead rank's DataLoader workers at its stop: no restart is burnt")
def test_a_restart_the_last_attempts_data_loader_workers_burn_is_a_failed_recovery_naming_them(tmp_path: Path) -> None:
    ran = _chaos("run", str(SCENARIO), "--out", str(tmp_path))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "external_loader_leftovers: KNOWN FAILURE" in ran.stdout
    burnt = HELD.findall(ran.stdout)
    assert burnt and [int(a) for a, *_ in burnt] == list(range(1, len(burnt) + 1)), ran.stdout
    (run_dir,) = tmp_path.glob("external_loader_leftovers-*")
    events = [json.loads(line) for line in (run_dir / "events" / "launcher.jsonl").read_text().splitlines()]
    at_start = [e for e in events if e["event"] == "leftovers_at_start"]
    assert [e["attempt"] for e in at_start][: len(burnt)] == [int(a) for a, *_ in burnt]
    held = {p["pid"] for p in at_start[0]["processes"] if int(burnt[0][1]) in p["ports"]}
    assert held and {p["name"] for p in at_start[0]["processes"]} == {"pt_data_worker"}
    gone = {e["target"]: e for e in events if e["event"] == "leftover_gone"}
    assert held <= set(gone)  # each went, and was seen going, before the attempt that trained to the end
    assert float(burnt[0][2]) >= 15  # the slow batch (20 s) held one of them; its watchdog then saw the rank gone

    again = _chaos("judge", str(run_dir))  # the folder alone gives the same verdict
    assert again.returncode == 0 and "external_loader_leftovers: KNOWN FAILURE" in again.stdout
    assert HELD.findall(again.stdout) == burnt

    copy = run_dir / "scenario.yaml"
    scenario = yaml.safe_load(copy.read_text())
    scenario["known_failure"] = None
    copy.write_text(yaml.safe_dump(scenario))
    judged = _chaos("judge", str(run_dir))
    assert judged.returncode == 1, judged.stdout + judged.stderr
    assert "external_loader_leftovers: FAILED" in judged.stdout and "FAIL restarts: expected == 1" in judged.stdout
    assert HELD.findall(judged.stdout) == burnt
    assert "ok   unexplained_failures: expected none, observed none" in judged.stdout
