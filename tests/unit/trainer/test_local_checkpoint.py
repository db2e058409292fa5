"""NVRx local checkpoints through NVRx's own LocalCheckpointManager, on CPU and gloo: the resume takes the
newest local checkpoint when it is at least as new as the persistent one, bit-exactly, with either of
Megatron's algorithms; a node's lost folder falls back to the persistent checkpoint; loading is
``weights_only``; an interrupted save's file does not block the next save of its iteration."""

from __future__ import annotations

import shutil
import socket

import pytest
import torch

from trainer import nvrx_compat
from trainer.local_checkpoint import LocalStateDict, leaves, owners, rebuild

N = 10
"""Steps of the whole run; a first run stops at 7 (the LR schedule's length is N in both)."""


def local_args(tmp_path, iters: int, algo: str = "fully_parallel") -> list[str]:
    return [
        f"train.train_iters={iters}", f"scheduler.lr_decay_iters={N}", "checkpoint.save_interval=5", f"checkpoint.save={tmp_path / 'ckpt'}",
        "checkpoint.non_persistent_ckpt_type=local", "checkpoint.non_persistent_save_interval=1",
        f"checkpoint.non_persistent_local_ckpt_dir={tmp_path / 'local'}", f"checkpoint.non_persistent_local_ckpt_algo={algo}",
    ]


@pytest.mark.parametrize("algo", ["fully_parallel", "atomic"])
def test_resume_from_a_local_checkpoint_is_bit_identical(launch, tmp_path, algo):
    uninterrupted = launch.train([f"train.train_iters={N}", f"scheduler.lr_decay_iters={N}"], 2, name="uninterrupted")
    first = launch.train(local_args(tmp_path, 7, algo), 2, name="first")
    resumed = launch.train(local_args(tmp_path, N, algo), 2, name="resumed")

    saved = [e["iteration"] for e in first.events("local_checkpoint_save")]
    assert saved == [1, 2, 3, 4, 6, 7], "a step that saves a persistent checkpoint saves no local one"
    for rank in (0, 1):
        (resume,) = resumed.events("resume", rank=rank)
        assert (resume["iteration"], resume["local"]) == (7, True)
    # Only the newest local checkpoint stays (NVRx's cleanup), one file per rank under <dir>/<node>/<rank>.
    files = sorted(p.relative_to(tmp_path / "local") for p in (tmp_path / "local").rglob("*.pt"))
    assert [p.parts[1:] for p in files] == [("0", "iter_0000009_0_local.pt"), ("1", "iter_0000009_1_local.pt")]
    expected = {i: loss for i, loss in uninterrupted.losses().items() if i > 7}
    assert resumed.losses() == expected
    assert (resumed.run_dir / "final_weights.sha256").read_text() == (uninterrupted.run_dir / "final_weights.sha256").read_text()


def test_a_lost_local_folder_falls_back_to_the_persistent_checkpoint(launch, tmp_path):
    launch.train(local_args(tmp_path, 7), 2, name="first")
    shutil.rmtree(tmp_path / "local" / socket.gethostname() / "1")  # rank 1's share is gone
    resumed = launch.train(local_args(tmp_path, N), 2, name="resumed")
    (resume,) = resumed.events("resume")
    assert resume["iteration"] == 5 and "local" not in resume


def test_a_local_checkpoint_loads_with_weights_only(tmp_path):
    """A file holding anything but tensors, plain data and LocalStateDict is refused, not unpickled."""
    from trainer.local_checkpoint import _Manager

    manager = _Manager(tmp_path)
    manager._ensure_dir()
    torch.save({"payload": socket.socket}, manager._local_ckpt_path_from_id((3, 0, "")))
    with pytest.raises(Exception, match="weights_only|Unsupported global"):
        manager._load((3, 0, ""))
    good = LocalStateDict({("model", "w"): torch.ones(2)}, {"rank": {"iteration": 3}})
    torch.save(good, manager._local_ckpt_path_from_id((4, 0, "")))
    loaded = manager._load((4, 0, ""))
    assert torch.equal(loaded.named[("model", "w")], torch.ones(2)) and loaded.common == {"rank": {"iteration": 3}}


def test_an_interrupted_save_would_block_nvrx_041_and_is_removed_at_start(tmp_path):
    """NVRx opens a save's .dirty file with "bx": one left by a killed save makes the next save of that
    iteration fail. The trainer removes this rank's interrupted files before it saves anything."""
    from trainer.local_checkpoint import _Manager

    nvrx = nvrx_compat.local_checkpointing()
    manager = _Manager(tmp_path)
    manager._ensure_dir()
    dirty = manager._local_ckpt_path_from_id((8, 0, ""), is_dirty=True)
    dirty.write_bytes(b"half a checkpoint")
    with pytest.raises(nvrx.CheckpointingException, match="already exists"):
        manager._save(LocalStateDict({}, {}), (8, 0, ""))
    manager.remove_interrupted()
    assert not dirty.exists()
    manager._save(LocalStateDict({}, {}), (8, 0, ""))
    assert manager._local_ckpt_path_from_id((8, 0, "")).is_file()


def test_fully_parallel_splits_the_replicas_bytes_and_rebuild_inverts_leaves():
    tree = {"model": {"a": torch.zeros(10), "b": torch.zeros(3)}, "optim": {"param_groups": [{"lr": 0.1, "params": ["a"]}]}}
    tensors = [(p, v) for p, v in leaves(tree) if isinstance(v, torch.Tensor)]
    assert owners(tensors, 2) == {("model", "a"): 0, ("model", "b"): 1}
    assert rebuild(tree, dict(leaves(tree))) == tree
