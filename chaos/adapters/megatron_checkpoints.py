"""A Megatron-LM or Megatron Bridge save folder: where a restart resumes, and which saves finished."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TRACKER_FILE = "latest_checkpointed_iteration.txt"
"""Megatron-LM's tracker (``get_checkpoint_tracker_filename``); Bridge writes it too, beside its own
``latest_train_state.pt``."""


class CheckpointFolderError(ValueError):
    """A folder that is not a Megatron checkpoint folder, or a tracker that cannot be read."""


@dataclass(frozen=True)
class CheckpointFolder:
    """What a Megatron save folder holds: where a restart resumes, and which saves finished.

    ``latest`` is the tracker's iteration (0 for a ``release`` checkpoint, None without a tracker: a
    restart starts from scratch); ``iterations`` the ``iter_NNNNNNN`` folders; ``complete`` those whose
    save was finalized: ``metadata.json`` (torch_dist, written by ``dist_checkpointing.save``'s finalize
    function) or ``mp_rank_*/model_optim_rng.pt`` (the legacy torch format).
    """

    path: Path
    latest: int | None
    release: bool
    iterations: tuple[int, ...]
    complete: tuple[int, ...]


def read_checkpoint_folder(path: str | Path) -> CheckpointFolder:
    folder = Path(path)
    if not folder.is_dir():
        raise CheckpointFolderError(f"{folder}: no such checkpoint folder")
    saves = sorted((int(p.name[5:]), p) for p in folder.glob("iter_*") if p.is_dir() and p.name[5:].isdigit())
    tracker = folder / TRACKER_FILE
    if not saves and not tracker.exists():
        raise CheckpointFolderError(f"{folder}: not a Megatron checkpoint folder (no {TRACKER_FILE}, no iter_* folder)")
    latest, release = _read_tracker(tracker) if tracker.exists() else (None, False)
    complete = tuple(i for i, p in saves if _finished(p))
    return CheckpointFolder(folder, latest, release, tuple(i for i, _ in saves), complete)


def _read_tracker(tracker: Path) -> tuple[int, bool]:
    """The tracker's iteration, as ``read_metadata`` reads it: an integer, or ``release``."""
    try:
        text = tracker.read_text().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointFolderError(f"{tracker}: unreadable ({e})") from None
    if text == "release":
        return 0, True
    if not text.isdigit():
        raise CheckpointFolderError(f"{tracker}: {text[:40]!r} is neither an iteration nor 'release'")
    return int(text), False


def _finished(iter_dir: Path) -> bool:
    return (iter_dir / "metadata.json").is_file() or any(iter_dir.glob("mp_rank_*/model_optim_rng.pt"))
