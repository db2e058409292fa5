"""The plugin's machine slot: timing-judged scenarios run alone under ``pytest -n N``, the rest share."""

import fcntl
from pathlib import Path

import pytest

from chaos.pytest_plugin import machine_slot, no_reclaim_wait, slot_file
from chaos.schema.loader import load_scenario

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def can_lock(path: Path, mode: int) -> bool:
    """Whether another holder (a fresh open file description, as another worker has) could lock now."""
    with open(path, "a") as f:
        try:
            fcntl.flock(f, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


def test_shared_runs_admit_each_other_but_not_a_run_alone(tmp_path):
    lock = tmp_path / "slot.lock"
    with machine_slot(lock, alone=False):
        assert can_lock(lock, fcntl.LOCK_SH)
        assert not can_lock(lock, fcntl.LOCK_EX)
    assert can_lock(lock, fcntl.LOCK_EX)


def test_a_run_alone_admits_nobody_until_it_ends(tmp_path):
    lock = tmp_path / "slot.lock"
    with machine_slot(lock, alone=True):
        assert not can_lock(lock, fcntl.LOCK_SH)
    assert can_lock(lock, fcntl.LOCK_SH)


def test_the_slot_is_released_when_the_run_fails(tmp_path):
    lock = tmp_path / "slot.lock"
    with pytest.raises(RuntimeError), machine_slot(lock, alone=True):
        raise RuntimeError("run failed")
    assert can_lock(lock, fcntl.LOCK_EX)


def test_without_xdist_there_is_no_slot_to_take(tmp_path_factory, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)
    assert slot_file(tmp_path_factory) is None
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "abc")
    assert slot_file(tmp_path_factory) == tmp_path_factory.getbasetemp().parent / "chaos-machine-abc.lock"
    shared = tmp_path_factory.getbasetemp().parent
    before = sorted(shared.iterdir())
    with machine_slot(None, alone=True):
        assert sorted(shared.iterdir()) == before  # no lock file is made, so nothing is held


@pytest.mark.parametrize(("name", "alone"), [("straggler_report", True), ("straggler_gpu", True), ("rank_killed", False), ("sigterm_with_straggler", False), ("inprocess_exception", False)])
def test_only_straggler_detection_runs_alone(name, alone):
    assert load_scenario(SCENARIOS / f"{name}.yaml").runs_alone is alone


def test_packed_or_cpu_runs_do_not_wait_for_empty_gpus_unless_the_scenario_says():
    shared = no_reclaim_wait(load_scenario(SCENARIOS / "rank_killed.yaml"))
    assert shared.ft.gpu_memory_reclaim_timeout == 0.0
    own = load_scenario(SCENARIOS / "rank_killed.yaml")
    own = own.replace(ft={"gpu_memory_reclaim_timeout": 20.0})
    assert no_reclaim_wait(own).ft.gpu_memory_reclaim_timeout == 20.0


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_scenario_is_one_a_packed_gpu_session_can_run(path: Path) -> None:
    """What `nox -s gpu` makes of each file (its trainer on cuda, packed runs' GPU wait off) is a valid
    scenario; a `command`, which chooses its own device, keeps its argv and has no trainer overrides."""
    from chaos.supervise.runner import on_device

    scenario = load_scenario(path)
    packed = no_reclaim_wait(on_device(scenario, "cuda"))
    assert packed.ft.gpu_memory_reclaim_timeout is not None
    if scenario.command is None:
        assert packed.config.dist.device == "cuda"
    else:
        assert (packed.command, packed.trainer) == (scenario.command, {})
