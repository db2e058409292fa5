"""Storage faults: break the newest checkpoint the way a dying disk or a torn copy does.

``truncate`` cuts the largest file of the newest checkpoint to half its size (a copy that stopped);
``garble`` flips bytes in its middle and keeps the size (silent corruption: only a checksum sees it).
The trainer must notice on load (its manifest check) and fall back to the previous good checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from trainer.components import CheckpointCandidate

GARBLE_BYTES = 64


def corrupt_newest(candidates: Sequence[CheckpointCandidate], mode: Literal["truncate", "garble"]) -> Path | None:
    """Break the largest data file of the newest of the trainer's checkpoints; returns it (None: there is no
    checkpoint, or the newest has no data file)."""
    files = candidates[0].data_files() if candidates else []
    if not files:
        return None
    victim = max(files, key=lambda p: p.stat().st_size)
    size = victim.stat().st_size
    with open(victim, "r+b") as f:
        if mode == "truncate":
            f.truncate(size // 2)
        else:
            f.seek(size // 2)
            chunk = f.read(GARBLE_BYTES)
            f.seek(size // 2)
            f.write(bytes(b ^ 0xFF for b in chunk))
    return victim
