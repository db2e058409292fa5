"""Signal faults from outside: the attempt they fire in, and the pids they go to (output-line steps: test_launch.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from chaos.supervise.attempts import AttemptTracker
from chaos.supervise.faults import Sigterm
from chaos.supervise.procs import alive, worker_pids
from chaos.supervise.signals import EventSteps, ExternalFaults


def test_a_signal_fault_fires_in_an_attempt_only_the_ranks_number(run_logs, tmp_path: Path) -> None:
    """An in-process restart starts attempt 1 with no launcher line: the ranks' steps tell the runner."""
    fault = Sigterm(fault_id="f0", rank=None, attempt=1, at_step=3, delay_s=None, ranks=None, target="all", grace_s=5)
    attempts = AttemptTracker()
    faults = ExternalFaults([fault], run_logs.runner(), attempts, "no-such-run", EventSteps(tmp_path))
    first = run_logs.rank(0, attempt=0)
    for step in (1, 2, 3):
        first.emit("step", iteration=step, loss=1.0)
    faults.tick()
    assert faults.armed[0].fired_at is None
    run_logs.rank(0, attempt=1).emit("step", iteration=3, loss=1.0)
    faults.tick()
    assert faults.armed[0].fired_at is not None
    assert (attempts.running(), attempts.launcher()) == (1, 0)
    fired = [json.loads(x) for x in (tmp_path / "events" / "launcher.jsonl").read_text().splitlines()]
    assert [(e["event"], e["attempt"], e["iteration"], e["target"], e["grace_s"]) for e in fired] == [
        ("fault_injected", 1, 3, "all", 5),
    ]


def test_worker_pids_ignore_processes_of_other_runs() -> None:
    assert worker_pids("no-such-run") == []
    assert alive(os.getpid()) and not alive(2**22 + 1)
