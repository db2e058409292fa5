"""The preemption component: the signal handler only records; the stop comes after the step, once."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from runlog.log import EventLog
from trainer.config import parse_signal
from trainer.config_base import ConfigError
from trainer.resiliency.preemption import Preemption


def test_preemption_records_and_reports_once(tmp_path: Path) -> None:
    events = EventLog(tmp_path, "rank-0", rank=0, attempt=0)
    handler = Preemption("SIGUSR1", events)
    try:
        assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL, "installed when training starts, as Bridge does"
        handler.on_train_start(None, 0)
        assert handler.stop_reason(3) is None
        os.kill(os.getpid(), signal.SIGUSR1)
        assert handler.stop_reason(4) == "signal"
        assert handler.stop_reason(5) == "signal"
    finally:
        handler.close()
        events.close()
    lines = [json.loads(x) for x in (tmp_path / "events" / "rank-0.jsonl").read_text().splitlines()]
    assert [(e["event"], e["signal"], e["iteration"]) for e in lines] == [("signal_received", "SIGUSR1", 4)]
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL


VOTE_STEP = 3


def signal_during_the_vote(rank: int) -> None:
    """At step VOTE_STEP, rank 1 joins the stop vote 1.5 s late and votes to stop; rank 0's SIGTERM arrives
    0.3 s after it entered the vote, while it waits in the all-reduce (so after it read its stop reasons)."""
    import trainer.loop

    real = trainer.loop.all_ranks_agree
    calls = 0

    def vote(flag: bool, device):
        nonlocal calls
        calls += 1
        if calls == VOTE_STEP and rank == 0:
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
        if calls == VOTE_STEP and rank == 1:
            time.sleep(1.5)
            flag = True
        return real(flag, device)

    trainer.loop.all_ranks_agree = vote


def test_a_signal_that_arrives_during_the_stop_vote_is_the_ranks_reason(launch) -> None:
    """The race a loaded machine showed: rank 0's SIGTERM came while it waited for its peer in the stop vote.
    The vote stops every rank; rank 0 must exit for its own signal, and log it, not report only its peer's stop."""
    run = launch.start(
        ["train.train_iters=50", "train.exit_signal_handler=true"], world_size=2, child_setup=signal_during_the_vote
    )
    assert run.wait(60) == [0, 0], run.tails()
    assert [(e["signal"], e["iteration"]) for e in run.events("signal_received")] == [("SIGTERM", VOTE_STEP)]
    assert [(e["reason"], e["iteration"]) for e in run.events("exit")] == [("signal", VOTE_STEP)]
    assert [e["reason"] for e in run.events("exit", rank=1)] == ["peer_stopped"]


@pytest.mark.parametrize("name", ["SIGKILL", "SIGSTOP", "SIGNOPE"])
def test_uncatchable_or_unknown_exit_signal_is_a_config_error(name: str) -> None:
    with pytest.raises(ConfigError, match="train.exit_signal"):
        parse_signal(name)
