"""The one-host Slurm itself: it starts with its nodes idle, and stopping it leaves no daemon and no job process,
even of a job still running and of a process that left its job's process tree (proctrack/linuxproc loses it)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from chaos.supervise.procs import alive

pytestmark = pytest.mark.slurm


def test_stop_leaves_no_daemon_and_no_job_process(new_cluster, tmp_path: Path) -> None:  # noqa: ANN001 - a factory
    cluster = new_cluster(nodes=1)
    try:
        daemons = {name: p.pid for name, p in cluster.daemons.items()}
        assert set(daemons) == {"munged", "slurmctld", f"slurmd-{cluster.node_names[0]}"}
        out = tmp_path / "job.out"
        # A running step, and a process that escapes it (its own session, reparented away from slurmstepd).
        cluster.client(["sbatch", f"--output={out}", "--wrap", "srun bash -c 'setsid sleep 600 & sleep 600'"])
        end = time.monotonic() + 30
        while len(cluster.leftovers()) < 4 and time.monotonic() < end:  # two slurmstepd, the step's shells and sleeps
            time.sleep(0.5)
        running = cluster.leftovers()
        assert cluster.jobs() and len(running) >= 4, running
    finally:
        cluster.stop()
    assert [name for name, pid in daemons.items() if alive(pid)] == []
    assert [pid for pid in running if alive(pid)] == []
    assert cluster.leftovers() == []
    assert not cluster.home.exists()
