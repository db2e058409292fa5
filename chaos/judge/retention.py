"""What checkpoint retention (``checkpoint.most_recent_k``) promises a restart, checked against its events.

With retention k the trainer keeps the last k checkpoints it sealed. A restart must resume from the newest
of them that no fault destroyed (a checkpoint the trainer rejected as corrupt); never from an older one,
which a bug in pruning or sealing leaves it with. Losing all k is no failure when a fault destroyed them:
the restart then starts from scratch. The k comes from the scenario's config, what the setting promises,
never from the run's own events.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from runlog import names

Event = dict[str, Any]
_ITERATION = re.compile(r"iter_(\d+)$")


def kept(sealed: list[int], most_recent_k: int) -> list[int]:
    """The checkpoints retention keeps of those sealed in this order (sealing one again makes it the newest)."""
    order = list(dict.fromkeys(reversed(sealed)))[::-1]
    return order if most_recent_k < 1 else order[-most_recent_k:]


def stale_resumes(ordered: Iterable[Event], most_recent_k: int) -> int | None:
    """Restarts (rank 0's later attempts) that resumed from another persistent checkpoint than the newest one
    retention keeps, less those found corrupt; None when no attempt restarted. A resume from a checkpoint
    newer than every one sealed is one sealed as the fault struck, before its save_end was written: no
    failure. A resume from an NVRx local checkpoint is the local one's decision, not retention's."""
    sealed: list[int] = []
    rejected: set[int] = set()
    decided: set[int] = set()
    stale, restarts = 0, 0
    for e in ordered:
        if e["rank"] != 0:
            continue
        if e["event"] == names.CHECKPOINT_SAVE_END:
            sealed.append(e["iteration"])
        elif e["event"] == names.CHECKPOINT_CORRUPT and (m := _ITERATION.search(e["path"].rstrip("/"))):
            rejected.add(int(m.group(1)))
        elif e["event"] in (names.RESUME, names.STEP) and e["attempt"] >= 1 and e["attempt"] not in decided:
            decided.add(e["attempt"])
            restarts += 1
            if e.get("local"):
                continue
            resumed = e["iteration"] if e["event"] == names.RESUME else 0
            expected = max((i for i in kept(sealed, most_recent_k) if i not in rejected), default=0)
            stale += resumed != expected and resumed <= max(sealed, default=0)
    return stale if restarts else None
