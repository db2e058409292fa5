"""Checkpoints: round trip through the real trainer, verification, fallback, atomicity, async saves.

One uninterrupted 2-rank run (10 steps, a checkpoint every 5) is shared by the module; a test that
damages or resumes from its checkpoints works on a copy.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import torch

from trainer.checkpoint import MANIFEST, TRACKER, iteration_dir, list_checkpoints, verify, write_manifest

WORLD = 2
RUN = ["train.train_iters=10", "checkpoint.save_interval=5"]


@pytest.fixture(scope="module")
def baseline(module_launch):
    """The uninterrupted reference: 10 steps on 2 ranks, checkpoints at 5 and 10."""
    ckpt = module_launch.tmp_path / "ckpt"
    return module_launch.train([*RUN, f"checkpoint.save={ckpt}"], WORLD, name="baseline")


def ckpt_of(run) -> Path:
    return run.run_dir.parent / "ckpt"


def copy_checkpoints(run, tmp_path: Path) -> Path:
    return Path(shutil.copytree(ckpt_of(run), tmp_path / "ckpt"))


def garble(path: Path, at: int | None = None) -> None:
    """Flip one byte in place: same size, different content."""
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if at is None else at
    data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def final_weights(run) -> dict[str, torch.Tensor]:
    return torch.load(run.run_dir / "final_weights.pt", weights_only=True)


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]


# ------------------------------------------------------------------------------ round trip
def test_round_trip_checkpoint_holds_the_trained_state(baseline, tmp_path):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    ckpt = ckpt_of(baseline)
    assert [i for i, _ in list_checkpoints(ckpt)] == [10, 5]
    assert (ckpt / TRACKER).read_text() == "10\n"
    for _, folder in list_checkpoints(ckpt):
        assert verify(folder) is None
    newest = iteration_dir(ckpt, 10)
    manifest = json.loads((newest / MANIFEST).read_text())
    assert (manifest["iteration"], manifest["world_size"]) == (10, WORLD)
    assert {".metadata", "rank_state/rank-0.pt", "rank_state/rank-1.pt"} <= set(manifest["files"])

    # The DCP model state of the last checkpoint is bit for bit the weights the run ended with.
    dcp_to_torch_save(newest, tmp_path / "converted.pt")
    saved = torch.load(tmp_path / "converted.pt", weights_only=True)
    assert_same_weights(saved["model"], final_weights(baseline))
    assert saved["optim"]["state"], "optimizer moments are saved too"

    for rank in range(WORLD):
        state = torch.load(newest / "rank_state" / f"rank-{rank}.pt", weights_only=True)
        assert state["iteration"] == 10
        assert state["schedule"] == {"num_steps": 10}
        assert state["data"] == {"consumed_samples": 10 * 2 * WORLD}  # tiny_cpu: micro-batch 2 per rank
        assert set(state["rng"]) >= {"python", "numpy", "torch"}


def test_save_events_bracket_each_save_on_every_rank(baseline):
    for rank in range(WORLD):
        saves = [(e["event"], e["iteration"]) for e in baseline.events(rank=rank) if e["event"].startswith("checkpoint_save")]
        assert saves == [("checkpoint_save_begin", 5), ("checkpoint_save_end", 5),
                         ("checkpoint_save_begin", 10), ("checkpoint_save_end", 10)]


# ------------------------------------------------------------------------------ verify / list
def _truncate(folder: Path) -> None:
    data = folder / "__0_0.distcp"
    data.write_bytes(data.read_bytes()[:-100])


def _garble_data(folder: Path) -> None:
    garble(folder / "__0_0.distcp")


def _garble_rank_state(folder: Path) -> None:
    garble(folder / "rank_state" / "rank-1.pt", at=-10)


def _drop_manifest(folder: Path) -> None:
    (folder / MANIFEST).unlink()


def _break_manifest(folder: Path) -> None:
    (folder / MANIFEST).write_text('{"iteration": 10, "files": ')


def _drop_file(folder: Path) -> None:
    (folder / ".metadata").unlink()


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_truncate, "__0_0.distcp: size"),
        (_garble_data, "__0_0.distcp: sha256 mismatch"),
        (_garble_rank_state, "rank_state/rank-1.pt: sha256 mismatch"),
        (_drop_manifest, "missing or unreadable manifest.json"),
        (_break_manifest, "missing or unreadable manifest.json"),
        (_drop_file, "missing file .metadata"),
    ],
)
def test_verify_catches_damage(baseline, tmp_path, damage, reason):
    folder = Path(shutil.copytree(iteration_dir(ckpt_of(baseline), 10), tmp_path / "iter"))
    assert verify(folder) is None
    damage(folder)
    assert reason in verify(folder)


def test_verify_without_hashes_checks_sizes_only(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.bin").write_bytes(b"abcdef")
    (tmp_path / "sub" / "b.bin").write_bytes(b"0123456789")
    write_manifest(tmp_path, iteration=3, world_size=1)
    garble(tmp_path / "sub" / "b.bin")
    assert verify(tmp_path, check_hashes=False) is None, "verify_on_load=false: a same-size garble passes"
    assert "sub/b.bin: sha256 mismatch" in verify(tmp_path)
    (tmp_path / "a.bin").write_bytes(b"abc")
    assert "a.bin: size 3 != 6" in verify(tmp_path, check_hashes=False)


def test_list_checkpoints_ignores_in_flight_and_foreign_entries(tmp_path):
    for name in ("iter_0000005", "iter_0000010", "iter_0000015.tmp", "iter_latest", "other"):
        (tmp_path / name).mkdir()
    (tmp_path / "iter_0000020").write_text("a file, not a checkpoint folder")
    assert list_checkpoints(tmp_path) == [(10, tmp_path / "iter_0000010"), (5, tmp_path / "iter_0000005")]
    assert list_checkpoints(tmp_path / "missing") == []


# ------------------------------------------------------------------------------ corrupt fallback
def test_corrupt_newest_checkpoint_falls_back_to_the_previous_one(baseline, launch, tmp_path):
    ckpt = copy_checkpoints(baseline, tmp_path)
    garble(iteration_dir(ckpt, 10) / "__1_0.distcp")
    resumed = launch.train([*RUN, f"checkpoint.save={ckpt}"], WORLD, name="resumed")

    corrupt = resumed.events("checkpoint_corrupt")
    assert [Path(e["path"]).name for e in corrupt] == ["iter_0000010"]
    assert "sha256 mismatch" in corrupt[0]["reason"]
    assert [e["iteration"] for e in resumed.events("checkpoint_load")] == [5]
    assert [e["iteration"] for e in resumed.events("checkpoint_load", rank=1)] == [5], "both ranks load the same one"
    # Steps 6..10 are recomputed exactly, and the bad checkpoint is replaced by a good one.
    assert resumed.losses() == {i: v for i, v in baseline.losses().items() if i > 5}
    assert_same_weights(final_weights(resumed), final_weights(baseline))
    assert verify(iteration_dir(ckpt, 10)) is None


# ------------------------------------------------------------------------------ atomicity
def test_rank_killed_mid_save_leaves_the_previous_checkpoint_loadable(launch, tmp_path):
    """SIGKILL both ranks while DCP is writing iteration 10: nothing of it may be loaded afterwards.

    The children (only) get a dcp.save that, for iteration 10, writes everything and then waits: the
    folder holds complete DCP data but is still `.tmp` (no manifest, not renamed), the most convincing
    half-save there is. A marker per rank says the write is done, so the kill lands in that window.
    """
    ckpt = tmp_path / "ckpt"
    args = [*RUN, f"checkpoint.save={ckpt}"]

    def slow_save(rank: int) -> None:
        import torch.distributed.checkpoint as dcp

        real_save = dcp.save

        def save(state_dict, *, checkpoint_id, **kwargs):
            result = real_save(state_dict, checkpoint_id=checkpoint_id, **kwargs)
            if str(checkpoint_id).endswith("iter_0000010.tmp"):
                (tmp_path / f"written-{rank}").touch()
                time.sleep(60)
            return result

        dcp.save = save

    killed = launch.start(args, WORLD, name="killed", child_setup=slow_save)
    killed.wait_until(lambda: all((tmp_path / f"written-{r}").exists() for r in range(WORLD)))
    assert [e["iteration"] for e in killed.events("checkpoint_save_begin")] == [5, 10]
    assert [e["iteration"] for e in killed.events("checkpoint_save_end")] == [5]
    killed.kill()
    assert killed.wait() == [-9] * WORLD

    tmp = ckpt / "iter_0000010.tmp"
    assert (tmp / ".metadata").is_file() and not (tmp / MANIFEST).exists()
    assert not iteration_dir(ckpt, 10).exists()
    assert (ckpt / TRACKER).read_text() == "5\n"

    def note_folders_at_load(rank: int) -> None:
        import torch.distributed.checkpoint as dcp

        real_load = dcp.load

        def load(state_dict, *, checkpoint_id, **kwargs):
            (tmp_path / f"at-load-{rank}.json").write_text(json.dumps(sorted(p.name for p in ckpt.iterdir())))
            return real_load(state_dict, checkpoint_id=checkpoint_id, **kwargs)

        dcp.load = load

    resumed = launch.start(args, WORLD, name="resumed", child_setup=note_folders_at_load)
    assert resumed.wait() == [0] * WORLD
    assert [e["iteration"] for e in resumed.events("checkpoint_load")] == [5]
    assert not resumed.events("checkpoint_corrupt")
    for rank in range(WORLD):
        at_load = json.loads((tmp_path / f"at-load-{rank}.json").read_text())
        assert "iter_0000010.tmp" not in at_load, "the stale .tmp is removed at start, before the load"
    assert not list(ckpt.glob("iter_*.tmp"))
    assert verify(iteration_dir(ckpt, 10)) is None


# ------------------------------------------------------------------------------ async save
def test_async_save_round_trip_resumes_exactly(baseline, launch, tmp_path):
    ckpt = tmp_path / "ckpt"
    args = [*RUN, f"checkpoint.save={ckpt}", "checkpoint.async_save=true"]
    stopped = launch.train([*args, "train.exit_interval=5"], WORLD, name="stopped")
    saves = stopped.events("checkpoint_save_end")
    assert [(e["iteration"], e["async"]) for e in saves] == [(5, True)], "sealed before the exit"
    assert verify(iteration_dir(ckpt, 5)) is None

    resumed = launch.train(args, WORLD, name="resumed")
    assert [e["iteration"] for e in resumed.events("checkpoint_load")] == [5]
    assert resumed.losses() == {i: v for i, v in baseline.losses().items() if i > 5}
    assert_same_weights(final_weights(resumed), final_weights(baseline))
    assert [(e["iteration"], e["async"]) for e in resumed.events("checkpoint_save_end")] == [(10, True)]
