"""Signal faults from outside: steps observed from output lines or events, and the attempt they fire in."""

from __future__ import annotations

import json
import os
from pathlib import Path

from chaos.supervise.faults import Sigterm
from chaos.supervise.signals import EventSteps, ExternalFaults, LogSteps, alive, worker_pids


def test_log_steps_count_attempts_from_restart_lines_in_order(tmp_path: Path) -> None:
    log = tmp_path / "launcher.log"
    log.write_text(
        "step 1 loss 2.5\nstep 2 loss 2.0\n"
        "[default] Worker group FAILED. 3/3 attempts left; will restart worker group\n"
        "step 1 loss 2.5\nstep 2 lo"
    )
    steps = LogSteps(tmp_path, r"^step (?P<step>\d+) loss (?P<loss>\S+)")
    assert steps.poll() == [(0, 1), (0, 2), (1, 1)]
    with open(log, "a") as f:
        f.write("ss 1.9\n")
    assert steps.poll() == [(1, 2)]
    steps.close()
    observed = [json.loads(x) for x in (tmp_path / "events" / "observed.jsonl").read_text().splitlines()]
    assert [(e["attempt"], e["iteration"], e["loss"], e["observed"]) for e in observed][-1] == (1, 2, 1.9, True)


def test_a_signal_fault_fires_in_an_attempt_only_the_ranks_number(run_logs, tmp_path: Path) -> None:
    """An in-process restart starts attempt 1 with no launcher line: the ranks' steps tell the runner."""
    fault = Sigterm(fault_id="f0", rank=None, attempt=1, at_step=3, delay_s=None, ranks=None, target="all", grace_s=5)
    faults = ExternalFaults([fault], run_logs.runner(), "no-such-run", EventSteps(tmp_path))
    first = run_logs.rank(0, attempt=0)
    for step in (1, 2, 3):
        first.emit("step", iteration=step)
    faults.tick()
    assert faults.armed[0].fired_at is None
    run_logs.rank(0, attempt=1).emit("step", iteration=3)
    faults.tick()
    assert faults.armed[0].fired_at is not None
    fired = [json.loads(x) for x in (tmp_path / "events" / "launcher.jsonl").read_text().splitlines()]
    assert [(e["event"], e["attempt"], e["iteration"], e["target"], e["grace_s"]) for e in fired] == [
        ("fault_injected", 1, 3, "all", 5),
    ]


def test_worker_pids_ignore_processes_of_other_runs() -> None:
    assert worker_pids("no-such-run") == []
    assert alive(os.getpid()) and not alive(2**22 + 1)
