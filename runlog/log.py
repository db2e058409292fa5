"""The event log writer: one JSON line per event, flushed as written.

Every process appends to ``<run_dir>/events/<source>.jsonl`` (``rank-<r>`` for a rank, ``launcher`` for the
chaos runner; a Slurm job's ``job``, ``agent-<node>``, ``watch-<node>`` and ``submit``). Each line carries ``event``, ``rank``, ``attempt``, ``pid``, ``node``, ``wall`` and ``mono``
plus the event's own fields (runlog.records); docs/events.md lists them. Lines are flushed as they are
written, so a SIGKILLed process loses nothing it logged. ``time.monotonic()`` is system-wide on Linux, so
``mono`` orders events across processes of one machine. A writer that finds the last line of its file
unfinished (its previous writer was killed mid-line) ends that line as torn (``runlog.reader.TORN``) before
its first event, so no event of its own is glued to half of another.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runlog.env import current_attempt, node_id
from runlog.layout import RunFolder
from runlog.reader import TORN
from runlog.records import Record


class EventLog:
    """Appends events for one source. A log without a folder drops events (a run without run_dir).

    ``attempt``: what every event carries; a callable for a writer whose attempt moves (the supervisor's
    follows its attempt tracker); None: this process's (``current_attempt()``).
    """

    def __init__(
        self, run_dir: str | Path | None, source: str, rank: int, attempt: int | Callable[[], int] | None = None,
        node: str | None = None,
    ):
        self.rank = rank
        self._attempt = current_attempt() if attempt is None else attempt
        self.node = node_id() if node is None else node
        self._file = None
        self.path: Path | None = None
        if run_dir is not None:
            self.path = RunFolder(Path(run_dir)).event_file(source)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", buffering=1)  # noqa: SIM115 - lives as long as the log
            if _unfinished(self.path):
                self._file.write(TORN.decode() + "\n")

    @property
    def attempt(self) -> int:
        return self._attempt() if callable(self._attempt) else self._attempt

    def write(self, record: Record, at: tuple[float, float] | None = None) -> dict[str, Any]:
        """Append one event; how every writer of this project logs. ``at``: (wall, mono) when it happened,
        for an event written down later than it happened (a signal noticed in a handler)."""
        fields = record.fields()
        if at is not None:
            fields["wall"], fields["mono"] = at
        return self.emit(record.event, **fields)

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append an event by name, untyped: for forged events in tests (the project's writers write records).
        A record's ``attempt``, ``node``, ``wall`` or ``mono`` overrides the log's."""
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


def _unfinished(path: Path) -> bool:
    """Whether the file's last line lacks its newline (a writer was killed while writing it)."""
    with open(path, "rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return False
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"
