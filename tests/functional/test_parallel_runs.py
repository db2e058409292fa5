"""Parallel runs never collide on a port (issue 30 §2): real `python -m chaos run` processes, all at once.

Each run is our trainer or a command that starts as Megatron does (rank 0 serves its store on MASTER_PORT,
tests/functional/standalone/master_port.py), under ft_launcher, whose own master-port pick is the race.
CI runs one round of each test; ``python -m benchmarks.parallel_runs --rounds N`` repeats them and
docs/performance.md records the counts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.parallel_runs import Round, run_round
from chaos.supervise.isolation import unavailable

pytestmark = pytest.mark.slow
needs_namespaces = pytest.mark.skipif(unavailable() is not None, reason=f"no network namespaces here: {unavailable()}")


def clean(r: Round) -> None:
    """No run failed, none saw EADDRINUSE, none spent a restart."""
    assert (r.failed, r.collisions, r.restarts) == (0, 0, 0), [x for x in r.results if x.cli_exit or x.collided or x.restarts]


@needs_namespaces
def test_sixteen_runs_at_once_never_collide(tmp_path: Path) -> None:
    r = run_round(tmp_path, runs=16, trainers=2, attack=False)
    clean(r)
    assert r.networks == ["netns"]


@needs_namespaces
def test_a_process_that_binds_each_workers_master_port_first_changes_nothing(tmp_path: Path) -> None:
    """It binds, in the machine's network, every worker's MASTER_PORT and CHAOS_STORE_PORT the moment the
    worker shows in /proc; the runs' own networks do not have it."""
    r = run_round(tmp_path, runs=8, trainers=2, attack=True)
    clean(r)
    # every run's workers seen in time: at least the store port of each (a trainer's also ft_launcher's pick)
    assert all(x.ports_taken >= (2 if x.name.endswith(("-00", "-01")) else 1) for x in r.results), r
    assert r.networks == ["netns"]


def test_without_a_network_of_its_own_a_run_binds_no_port_of_the_ephemeral_range(tmp_path: Path) -> None:
    """The fallback (CHAOS_NETWORK=machine, as where namespaces are refused): every worker's store is on a
    claimed port below the ephemeral range, so a process that takes ports a bind(0) or an outgoing
    connection lands on (ft_launcher's own pick among them: taken here for each trainer run) finds nothing
    of a run to take. A command's MASTER_PORT is the claimed one (its ft_launcher pick is taken when the
    attacker reads the worker before the shim's exec: a non-event as well)."""
    r = run_round(tmp_path, runs=4, trainers=2, attack=True, network="machine")
    clean(r)
    assert [x.ports_taken >= 1 for x in r.results[:2]] == [True, True], r  # each trainer's ft_launcher pick
    assert r.networks == ["claimed ports"]


def test_in_the_machines_network_a_port_bound_on_purpose_first_fails_the_start(tmp_path: Path) -> None:
    """The attacker is real: in a shared network, the port a worker is about to bind is lost to a process
    that binds it first (a claim binds nothing), and the run burns its restarts on it. Only the run's own
    network (above) stops that."""
    r = run_round(tmp_path, runs=1, trainers=0, attack=True, network="machine", every_port=True)
    assert r.collisions == 1 and r.failed == 1, r
