"""The one reader of event logs: incremental, torn-line safe, and aware of where each line came from.

Everybody reads events through :class:`EventTail`: the judge (``read_events``, the whole folder once), the
runner's step observation and the progress view (new events every tick), the Slurm node watcher, and the
trainer's in-process attempt numbering. A line is used once it is complete (its newline written), so a
line a killed writer left half-written is never read as an event; at the end of a run (``final=True``) a
last line without its newline is used if it parses, as it is then all there will ever be.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runlog.layout import RunFolder

Event = dict[str, Any]


@dataclass(frozen=True)
class Malformed:
    """A complete line that is not an event, and where it is."""

    path: Path
    line: int
    problem: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.problem}"


@dataclass
class LineTail:
    """The new complete lines of a growing file since the last call, numbered from 1 as in the file."""

    path: Path
    offset: int = 0
    partial: bytes = b""
    numbered: int = 0

    def lines(self) -> list[tuple[int, str]]:
        """(line number, text) of each line completed since the last call; a file that cannot be read (not
        there yet) has none."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        self.offset += len(data)
        *complete, self.partial = (self.partial + data).split(b"\n")
        first, self.numbered = self.numbered + 1, self.numbered + len(complete)
        return [(first + i, raw.decode(errors="replace")) for i, raw in enumerate(complete)]

    def rest(self) -> tuple[int, str] | None:
        """The unfinished last line, once the file is known to be complete (its writer is gone)."""
        if not self.partial:
            return None
        raw, self.partial = self.partial, b""
        self.numbered += 1
        return self.numbered, raw.decode(errors="replace")


@dataclass
class EventTail:
    """The events of a run folder's event files (``pattern`` in ``events/``) written since the last poll."""

    run_dir: Path
    pattern: str = "*.jsonl"
    malformed: list[Malformed] = field(default_factory=list)
    """Complete lines that were not events (bad JSON, or no ``event`` and ``mono``), in the order met."""
    _tails: dict[Path, LineTail] = field(default_factory=dict)

    def poll(self, final: bool = False) -> list[Event]:
        """New events, file by file (sorted by name), each file's in its order; ``final``: the writers are
        gone, so a last line without its newline is read too (skipped if it is half an event)."""
        for path in RunFolder(Path(self.run_dir)).events.glob(self.pattern):
            self._tails.setdefault(path, LineTail(path))
        parsed = []
        for path in sorted(self._tails):
            tail = self._tails[path]
            parsed += [self._parse(path, number, text, torn=False) for number, text in tail.lines()]
            rest = tail.rest() if final else None
            if rest is not None:
                parsed.append(self._parse(path, *rest, torn=True))
        return [e for e in parsed if e is not None]

    def _parse(self, path: Path, number: int, text: str, torn: bool) -> Event | None:
        if not text.strip():
            return None
        try:
            record = json.loads(text)
        except json.JSONDecodeError as e:
            if not torn:  # an unfinished last line is what a killed writer leaves: not a malformed event
                self.malformed.append(Malformed(path, number, f"not JSON ({e.msg})"))
            return None
        if not (isinstance(record, dict) and "event" in record and "mono" in record):
            self.malformed.append(Malformed(path, number, "not an event (no 'event' and 'mono')"))
            return None
        return record


def read_events(run_dir: str | Path) -> list[Event]:
    """Every event of a run folder, ordered by `mono`. A torn last line (a killed writer) is skipped."""
    return sorted(EventTail(Path(run_dir)).poll(final=True), key=lambda e: e["mono"])
