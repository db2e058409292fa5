"""Storage faults break the newest of the checkpoints the trainer offers, and only that one."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.faults.checkpoint.storage import corrupt_newest
from trainer.checkpoint import Candidate, list_checkpoints, verify, write_manifest


@pytest.mark.parametrize("mode", ["truncate", "garble"])
def test_corrupt_newest_breaks_only_the_newest_checkpoint(tmp_path: Path, mode: str) -> None:
    for it in (5, 10):
        folder = tmp_path / f"iter_{it:07d}"
        folder.mkdir()
        (folder / "data.distcp").write_bytes(bytes(range(256)) * 8)
        (folder / "small").write_bytes(b"x")
        write_manifest(folder, it, 1)
    victim = corrupt_newest([Candidate(i, f) for i, f in list_checkpoints(tmp_path)], mode)
    assert victim == tmp_path / "iter_0000010" / "data.distcp"
    assert verify(tmp_path / "iter_0000010") is not None
    assert verify(tmp_path / "iter_0000005") is None


def test_corrupt_newest_without_checkpoints_is_none() -> None:
    assert corrupt_newest([], "truncate") is None
