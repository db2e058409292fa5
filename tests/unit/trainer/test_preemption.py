"""The preemption component: the signal handler only records; the stop comes after the step, once."""

from __future__ import annotations

import json
import os
import signal
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


@pytest.mark.parametrize("name", ["SIGKILL", "SIGSTOP", "SIGNOPE"])
def test_uncatchable_or_unknown_exit_signal_is_a_config_error(name: str) -> None:
    with pytest.raises(ConfigError, match="train.exit_signal"):
        parse_signal(name)
