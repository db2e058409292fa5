"""Port claims with real concurrent processes: a claim is a locked file, held until released or its holder
dies; no two live claimers ever hold one port, also when they race for a dead runner's claim."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
from pathlib import Path

import pytest

from chaos.supervise import ports

FORK = multiprocessing.get_context("fork")


@pytest.fixture
def one_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """A private claim folder and a range of exactly one free port (forked claimers inherit both)."""
    port = random.randrange(33000, 60000)
    monkeypatch.setattr(ports, "LOCK_DIR", tmp_path / "claims")
    monkeypatch.setattr(ports, "RANGE", (port, port + 2))
    return port


def _claimer(start, results, done) -> None:
    """Claim the one port once every claimer is ready; hold any claim until the test is done."""
    start.wait()
    try:
        claim = ports.reserve_ports(1, attempts=30)
    except RuntimeError:
        results.put(None)
    else:
        results.put((os.getpid(), claim.ports[0]))
        done.wait(30)
        claim.release()


def _race(claimers: int) -> list:
    start, done, results = FORK.Barrier(claimers), FORK.Event(), FORK.Queue()
    procs = [FORK.Process(target=_claimer, args=(start, results, done)) for _ in range(claimers)]
    for p in procs:
        p.start()
    got = [results.get(timeout=30) for _ in procs]
    done.set()
    for p in procs:
        p.join(30)
    return [g for g in got if g is not None]


def _dead_runners_claim(port: int) -> None:
    """A real claimer killed while it holds the port: its file stays, unlocked."""
    ready = FORK.Event()

    def hold() -> None:
        ports.reserve_ports(1)
        ready.set()
        signal.pause()

    holder = FORK.Process(target=hold)
    holder.start()
    assert ready.wait(30)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(30)
    assert (ports.LOCK_DIR / str(port)).is_file()


def test_claimers_racing_for_a_dead_runners_port_get_it_once(one_port: int) -> None:
    for _ in range(15):
        _dead_runners_claim(one_port)
        winners = _race(6)
        assert [port for _, port in winners] == [one_port], winners
        assert not (ports.LOCK_DIR / str(one_port)).exists(), "a released claim leaves no file"


def test_a_live_claim_is_never_taken_and_a_dead_ones_file_is_swept(one_port: int) -> None:
    held = ports.reserve_ports(1)
    assert _race(3) == []
    assert ports.sweep_claims() == [] and (ports.LOCK_DIR / str(one_port)).is_file()
    held.release()
    _dead_runners_claim(one_port)
    assert ports.sweep_claims() == [one_port]
    assert list(ports.LOCK_DIR.iterdir()) == []
