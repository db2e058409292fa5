"""The event log: the one contract between the trainer and the chaos layer.

Every process appends JSON lines to ``<run_dir>/events/<source>.jsonl`` (``rank-<r>`` for a rank,
``launcher`` for the chaos runner). Each line carries ``event``, ``rank``, ``attempt``, ``pid``, ``node``,
``wall`` and ``mono`` plus the event's own fields; docs/events.md lists them. Lines are flushed as they
are written, so a SIGKILLed process loses nothing it logged. ``time.monotonic()`` is system-wide on Linux,
so ``mono`` orders events across processes of one machine.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


ATTEMPT_BASE_VAR = "CHAOS_ATTEMPT_BASE"
"""Restart rounds of earlier launches of the same run folder (set by the runner when it relaunches a job)."""


def current_attempt() -> int:
    """The restart round: the launcher's restart count (torchrun/ft_launcher set it; 0 for a plain process),
    numbered on from earlier launches of the same run folder, so a relaunched job never reuses an attempt."""
    return int(os.environ.get(ATTEMPT_BASE_VAR, "0")) + int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def node_id() -> str:
    """The node identity: CHAOS_NODE_ID when the runner sets one (simulated nodes), else the hostname."""
    return os.environ.get("CHAOS_NODE_ID") or socket.gethostname()


class EventLog:
    """Appends events for one source. A log without a folder drops events (a run without run_dir)."""

    def __init__(self, run_dir: str | Path | None, source: str, rank: int, attempt: int | None = None):
        self.rank = rank
        self.attempt = current_attempt() if attempt is None else attempt
        self.node = node_id()
        self._file = None
        if run_dir is not None:
            folder = Path(run_dir) / "events"
            folder.mkdir(parents=True, exist_ok=True)
            self.path: Path | None = folder / f"{source}.jsonl"
            self._file = open(self.path, "a", buffering=1)  # noqa: SIM115 - lives as long as the log
        else:
            self.path = None

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        record = {
            "event": event,
            "rank": self.rank,
            "attempt": self.attempt,
            "pid": os.getpid(),
            "node": self.node,
            "wall": time.time(),
            "mono": time.monotonic(),
            **fields,
        }
        if self._file is not None:
            self._file.write(json.dumps(record, default=str) + "\n")
        return record

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_events(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every event of a run folder, ordered by `mono`. A torn last line (a killed writer) is skipped."""
    events: list[dict[str, Any]] = []
    for path in sorted((Path(run_dir) / "events").glob("*.jsonl")):
        events.extend(_read_lines(path))
    events.sort(key=lambda e: e["mono"])
    return events


def _read_lines(path: Path) -> Iterator[dict[str, Any]]:
    with open(path) as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and "event" in record and "mono" in record:
                yield record
