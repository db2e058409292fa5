"""The one-host Slurm the tests submit to (one_host_slurm.py): started once per session, stopped by pid.

Where Slurm cannot be installed or started (not root, no apt-get) the tests skip with the reason, except
under ``CHAOS_REQUIRE_SLURM=1`` (CI), where that is a failure: CI must not pass by skipping them. After
each test every job still queued is cancelled and whatever is left of the cluster's jobs is killed and
fails the test; after the session no daemon and no job process may be alive.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from one_host_slurm import OneHostSlurm, SlurmUnavailable

NODES = 3
"""Simulated nodes (one slurmd each): two nodes and a hot spare."""


def start_cluster(nodes: int, keep_logs: Path | None = None) -> OneHostSlurm:
    """A started one-host Slurm, or a skip (a failure under CHAOS_REQUIRE_SLURM=1) saying why not."""
    cluster = OneHostSlurm(nodes=nodes, keep_logs=keep_logs)
    try:
        cluster.start()
    except SlurmUnavailable as e:
        cluster.stop()
        if os.environ.get("CHAOS_REQUIRE_SLURM") == "1":
            pytest.fail(f"CHAOS_REQUIRE_SLURM=1 but the one-host Slurm did not start: {e}")
        pytest.skip(f"no one-host Slurm here: {e}")
    return cluster


@pytest.fixture
def new_cluster() -> Callable[[int], OneHostSlurm]:
    """Start a one-host Slurm of its own (the test stops it), or skip as `slurm_cluster` does."""
    return start_cluster


@pytest.fixture(scope="session")
def slurm_cluster(request: pytest.FixtureRequest) -> Iterator[OneHostSlurm]:
    out = request.config.getoption("chaos_out")
    cluster = start_cluster(NODES, Path(out) / "slurm-daemon-logs" if out else None)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        installed = "" if cluster.install_s is None else f"packages installed in {cluster.install_s:.1f} s, "
        reporter.write_line(f"one-host Slurm: {installed}{NODES} nodes idle in {cluster.startup_s:.1f} s ({cluster.home})")
    daemons = [p.pid for p in cluster.daemons.values()]
    yield cluster
    killed = cluster.stop()
    alive = [pid for pid in daemons if Path(f"/proc/{pid}").exists()]
    assert not killed and not alive, f"the one-host Slurm left job processes {killed} and daemons {alive}"


@pytest.fixture
def slurm(slurm_cluster: OneHostSlurm) -> Iterator[OneHostSlurm]:
    """The session's cluster for one test; afterwards no job of it may be queued or have a process left."""
    yield slurm_cluster
    jobs = slurm_cluster.cancel_jobs()
    left = slurm_cluster.kill_leftovers()
    assert not jobs and not left, f"the test left Slurm jobs {jobs} and job processes {left}"


@pytest.fixture
def chaos_out(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Where the run folders go: --chaos-out/slurm when given (CI keeps them), else the test's own folder."""
    out = request.config.getoption("chaos_out")
    return Path(out) / "slurm" if out else tmp_path
