"""The storage and memory faults' rules: each bad input refused before launch, one line naming the field."""

from __future__ import annotations

import pytest

from chaos.faults.disk.planned import DiskFull, StorageStall, StorageStallOutside
from chaos.faults.disk.schema import checkpoint_floor
from chaos.faults.memory.planned import HostOom
from chaos.schema.scenario import ScenarioError, plan_faults

COMMAND = {"command": ["python", "train.py", "--out", "{run_dir}/ckpt"], "step_pattern": r"step (?P<step>\d+)", "trainer": {}}


def test_disk_full_plans_a_fault_of_the_runner_at_the_launcher(make_scenario) -> None:
    (full,) = plan_faults(make_scenario(faults=[{"type": "disk_full", "at_step": 10, "disk_bytes": 2 << 20}]), 0)
    assert isinstance(full, DiskFull)
    assert (full.target, full.ranks, full.at_step, full.disk_bytes, full.duration_s, full.path) == (
        "launcher", None, 10, 2 << 20, 2.0, "checkpoints")


@pytest.mark.parametrize(("fault", "message"), [
    ({"at_step": 7}, r"faults\[0\]\.at_step: 7 is not a checkpoint step \(save_interval 5, train_iters 20\)"),
    ({"at_step": 10, "disk_bytes": 100_000}, r"faults\[0\]\.disk_bytes: 100000 cannot hold one checkpoint of this model \(at least \d+ bytes\)"),
    ({"at_step": 10, "disk_bytes": 1000}, r"faults\[0\]\.disk_bytes: .*greater than or equal to 65536"),
    ({"at_step": 10, "rank": 1}, r"faults\[0\]: disk_full fills the run's disk, which every rank shares: leave out rank"),
    ({"at_step": 10, "path": "../elsewhere"}, r"faults\[0\]: path: a folder under the run folder, got '\.\./elsewhere'"),
    ({"after_s": 3}, r"faults\[0\]: disk_full fires at a step: give at_step \(not after_s\)"),
])
def test_disk_full_refuses_bad_input_naming_the_field(make_scenario, fault, message) -> None:
    with pytest.raises(ScenarioError, match=rf"^t.yaml: {message}"):
        make_scenario(trainer={"train.train_iters": 20, "checkpoint.save_interval": 5, "model.hidden_size": 64},
                      faults=[{"type": "disk_full", **fault}])


def test_the_floor_of_one_checkpoint_is_below_what_the_trainer_writes(make_scenario) -> None:
    """tiny_cpu's checkpoint is ~466 KB on disk (DCP files, metadata, rank state): the floor is what must fit."""
    floor = checkpoint_floor(make_scenario().config)
    assert 200_000 < floor < 466_000


def test_a_command_bounds_its_own_folder_and_its_step_is_observed(make_scenario) -> None:
    (full,) = plan_faults(make_scenario(**COMMAND, faults=[{"type": "disk_full", "at_step": 3, "path": "ckpt", "disk_bytes": 1 << 20}]), 0)
    assert isinstance(full, DiskFull) and full.path == "ckpt"


def test_storage_stall_is_our_trainers_inside_a_save_and_shorter_than_the_deadline(make_scenario) -> None:
    (stall,) = plan_faults(make_scenario(faults=[{"type": "storage_stall", "at_step": 10, "stall_s": 6}]), 0)
    assert isinstance(stall, StorageStall) and (stall.rank, stall.stall_s) == (0, 6)
    with pytest.raises(ScenarioError, match=r"^t.yaml: faults\[0\]\.stall_s: 200 is not shorter than deadline_s \(120\)$"):
        make_scenario(faults=[{"type": "storage_stall", "at_step": 10, "stall_s": 200}])
    with pytest.raises(ScenarioError, match=r"faults\[0\]\.at_step: 8 is not a checkpoint step"):
        make_scenario(faults=[{"type": "storage_stall", "at_step": 8, "stall_s": 2}])
    with pytest.raises(ScenarioError, match=r"faults\[0\]\.path: our trainer keeps its checkpoints in checkpoints"):
        make_scenario(faults=[{"type": "storage_stall", "at_step": 10, "stall_s": 2, "path": "ckpt"}])
    with pytest.raises(ScenarioError, match=r"faults\[0\]\.stall_s: .*greater than 0"):
        make_scenario(faults=[{"type": "storage_stall", "at_step": 10, "stall_s": 0}])


def test_a_commands_storage_is_stalled_from_outside_once_its_step_is_seen(make_scenario) -> None:
    (stall,) = plan_faults(make_scenario(**COMMAND, faults=[{"type": "storage_stall", "at_step": 5, "stall_s": 2, "path": "ckpt"}]), 0)
    assert isinstance(stall, StorageStallOutside)
    assert (stall.target, stall.rank, stall.at_step, stall.stall_s, stall.path) == ("launcher", None, 5, 2, "ckpt")
    with pytest.raises(ScenarioError, match=r"^t.yaml: faults\[0\]\.rank: a command's storage is stopped from outside"):
        make_scenario(**COMMAND, faults=[{"type": "storage_stall", "rank": 1, "at_step": 5, "stall_s": 2}])


def test_host_oom_grows_one_rank_of_our_trainer(make_scenario) -> None:
    (oom,) = plan_faults(make_scenario(faults=[{"type": "host_oom", "rank": 1, "at_step": 7}]), 0)
    assert isinstance(oom, HostOom) and (oom.rank, oom.limit_bytes) == (1, 64 << 20)
    with pytest.raises(ScenarioError, match=r"faults\[0\]: host_oom grows one rank's memory: give rank"):
        make_scenario(faults=[{"type": "host_oom", "at_step": 7}])
    with pytest.raises(ScenarioError, match=r"faults\[0\]\.limit_bytes: .*greater than or equal to 8388608"):
        make_scenario(faults=[{"type": "host_oom", "rank": 1, "at_step": 7, "limit_bytes": 1 << 20}])
    with pytest.raises(ScenarioError, match=r"faults\[0\]\.type: host_oom grows a rank of our trainer from inside it"):
        make_scenario(**COMMAND, faults=[{"type": "host_oom", "rank": 1, "at_step": 3}])


def test_a_stall_and_a_full_disk_cannot_share_the_checkpoint_folder(make_scenario) -> None:
    with pytest.raises(ScenarioError, match=r"faults\[1\]\.type: storage_stall and disk_full both make the checkpoint folder"):
        make_scenario(faults=[{"type": "disk_full", "at_step": 10}, {"type": "storage_stall", "at_step": 5, "stall_s": 1}])


def test_a_full_disk_is_one_nodes_run(make_scenario) -> None:
    with pytest.raises(ScenarioError, match=r"faults\[0\]\.type: disk_full fills the run's one disk; a multi-node run has one per node"):
        make_scenario(nodes=2, faults=[{"type": "disk_full", "at_step": 10}])
