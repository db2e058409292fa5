"""AdapterSteps: a foreign trainer's lines fed live to its adapter, written as observed events.

Fed the recorded real Megatron logs (tests/data/megatron) line by line, as the launch's reader hands them
over, with the attempt tracker moved by the restart and rendezvous lines as the launch moves it.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from chaos.adapters.launcher import NEXT_ROUND, classify
from chaos.supervise.attempts import AttemptTracker
from chaos.supervise.foreign import AdapterSteps
from runlog.reader import read_events
from runlog.records import Restart

DATA = Path(__file__).resolve().parents[3] / "data" / "megatron"


def feed(steps: AdapterSteps, attempts: AttemptTracker, lines: list[str], pause: float = 0.0) -> None:
    """As Launch._read does: a restart line and a rendezvous line move the tracker first, then the line is
    handed over with the attempt of the workers printing."""
    for line in lines:
        if isinstance(classify(line), Restart):
            attempts.restarted("launcher")
        attempt = attempts.next_round("launcher") if NEXT_ROUND.search(line) else attempts.printing("launcher")
        steps.line(line, attempt)
        time.sleep(pause)


def tracker() -> AttemptTracker:
    attempts = AttemptTracker()
    attempts.joined("launcher", 0)
    return attempts


def test_every_record_but_the_launchers_is_an_observed_event_of_its_attempt(tmp_path: Path) -> None:
    attempts = tracker()
    steps = AdapterSteps(tmp_path, "megatron")
    feed(steps, attempts, (DATA / "mlm_ft_kill/output.log").read_text().splitlines())
    found = steps.poll()
    steps.close()
    events = read_events(tmp_path)
    assert {e["event"] for e in events} >= {"step", "ft_timeouts", "fault_injected", "resume", "checkpoint_load", "exit"}
    assert not {"worker_failed", "restart"} & {e["event"] for e in events}, "the launch writes the launcher's lines"
    assert all(e["observed"] and e["rank"] == 0 for e in events)
    assert found[0] == (0, 1) and found[-1] == (1, 100) and (1, 31) in found
    assert [(e["attempt"], e["iteration"]) for e in events if e["event"] == "checkpoint_load"] == [(1, 30)]
    lines = (DATA / "mlm_ft_kill/output.log").read_text().splitlines()
    assert all(lines[e["line"] - 1] for e in events)
    (fault,) = [e for e in events if e["event"] == "fault_injected"]
    assert "inject_fault:sending signal" in lines[fault["line"] - 1]


def test_records_are_stamped_on_arrival_and_an_announced_fault_at_its_own_time(tmp_path: Path) -> None:
    """The injector's fault for T is given out at the first line stating T or later; it is stamped back by
    how much later that line says it is."""
    attempts = tracker()
    steps = AdapterSteps(tmp_path, "megatron")
    announce = "WARNING:megatron.core.fault_injector:[2026-12-01 10:12:24.199473] FAULT INJECTION: Rank 0 will inject fault SIGSTOP at 2026-12-01 10:12:27.199473"
    step = " [2026-12-01 10:12:24.244423] iteration       21/     100 | lm loss: 8.498627E+00 |"
    timeout = "2026-12-01 10:12:29,612 [WARNING] [vm] rank_monitor_server.py:522 [Cycle 0] Section 'step' has been open for 2.48 seconds. Timeout is 1.61 seconds."
    before = time.monotonic()
    feed(steps, attempts, [announce, step, timeout], pause=0.05)
    after = time.monotonic()
    steps.close()
    by_name = {e["event"]: e for e in read_events(tmp_path)}
    assert by_name.keys() == {"step", "fault_injected"}, "the timeout line is the launch's to write"
    assert before < by_name["step"]["mono"] < after
    fault = by_name["fault_injected"]
    timeout_arrived = by_name["step"]["mono"] + 0.05
    assert fault["iteration"] == 21
    assert fault["mono"] == pytest.approx(timeout_arrived - (29.612 - 27.199473), abs=0.03)


def test_a_relaunch_numbers_its_attempts_on_and_closes_the_last_launch(tmp_path: Path) -> None:
    """rerun_persistent: the exit-16 launch's exit is given out when the next launch's first line comes."""
    attempts = tracker()
    steps = AdapterSteps(tmp_path, "megatron")
    first = (DATA / "rerun_persistent/1_first/output.log").read_text().splitlines()
    other = (DATA / "rerun_persistent/3_other_node/output.log").read_text().splitlines()
    feed(steps, attempts, first)
    attempts.joined("launcher", attempts.relaunched())  # as the runner relaunches and the next Launch starts
    feed(steps, attempts, other)
    steps.close()
    exits = [e for e in read_events(tmp_path) if e["event"] == "exit"]
    assert [(e["attempt"], e["code"], e["line"]) for e in exits] == [(0, 16, len(first)), (1, 17, len(first) + len(other))]
