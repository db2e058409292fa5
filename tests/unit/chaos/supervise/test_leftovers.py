"""What an earlier attempt left running, read from /proc of real processes (chaos/supervise/leftovers.py): a
rank that forked a child after it opened its listening socket and a checkpoint file, then was SIGKILLed, as
a DataLoader worker outlives its rank."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.supervise.leftovers import LeftoverWatch, listening_ports, scan
from chaos.supervise.procs import alive
from runlog.env import RUN_ID_VAR
from runlog.leftover_records import LeftoverGone, LeftoversAtStart
from runlog.records import Record

RANK = """\
import ctypes, os, socket, sys, time
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
ckpt = open(sys.argv[1], "wb")
child = os.fork()
if child == 0:
    ctypes.CDLL(None).prctl(15, b"pt_data_worker")  # PR_SET_NAME, as torch names its DataLoader workers
    print(server.getsockname()[1], os.getpid(), flush=True)  # once named: the tests read its name
    time.sleep(60)
    os._exit(0)
time.sleep(60)
"""


@pytest.fixture
def orphan(tmp_path: Path) -> Iterator[tuple[str, int, int, Path]]:
    """(run id, port, pid, checkpoint file) of a child that holds its rank's listening port and checkpoint
    file after the rank (round 0, rank 0 of the run) was SIGKILLed."""
    run_id, ckpt = f"leftovers-{uuid.uuid4().hex[:8]}", tmp_path / "checkpoints" / "ckpt.pt"
    ckpt.parent.mkdir()
    env = {**os.environ, RUN_ID_VAR: run_id, "RANK": "0", "TORCHELASTIC_RESTART_COUNT": "0"}
    rank = subprocess.Popen([sys.executable, "-c", RANK, str(ckpt)], stdout=subprocess.PIPE, text=True, env=env)
    assert rank.stdout is not None
    port, child = map(int, rank.stdout.readline().split())
    rank.kill()
    rank.wait()
    try:
        yield run_id, port, child, ckpt
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)


def test_a_forked_child_holds_its_dead_ranks_port_and_file_and_is_an_earlier_attempts(orphan) -> None:
    run_id, port, child, ckpt = orphan
    assert port in listening_ports(child)
    (held,) = scan(run_id, attempt=1, folder=ckpt.parent)
    assert (held.pid, held.name, held.attempt, held.rank) == (child, "pt_data_worker", 0, 0)
    assert port in held.ports and held.files == (str(ckpt.resolve()),) and held.gpu_mib is None
    assert scan(run_id, attempt=0, folder=ckpt.parent) == []  # of its own round: no leftover


def test_the_watch_records_it_at_the_attempts_start_and_once_when_it_goes(orphan) -> None:
    run_id, port, child, ckpt = orphan
    written: list[Record] = []
    watch = LeftoverWatch(run_id, ckpt.parent, written.append)
    watch.attempt_starts(1)
    watch.attempt_starts(2)
    time.sleep(0.3)
    os.kill(child, signal.SIGKILL)
    end = time.monotonic() + 5
    while not any(isinstance(r, LeftoverGone) for r in written) and time.monotonic() < end:
        time.sleep(0.05)
    watch.stop()
    starts = [r for r in written if isinstance(r, LeftoversAtStart)]
    assert [r.fields()["attempt"] for r in starts] == [1, 2]
    assert starts[0].fields()["processes"][0]["pid"] == child and port in starts[0].fields()["processes"][0]["ports"]
    (gone,) = [r for r in written if isinstance(r, LeftoverGone)]
    assert (gone.target, gone.name, gone.of_attempt) == (child, "pt_data_worker", 0) and gone.after_s >= 0.3


def test_nothing_left_writes_nothing(tmp_path: Path) -> None:
    written: list[Record] = []
    watch = LeftoverWatch(f"none-{uuid.uuid4().hex[:8]}", tmp_path, written.append)
    assert watch.attempt_starts(1) == [] and written == []
    watch.stop()
