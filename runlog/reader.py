"""The one reader of event logs: incremental, torn-line safe, and aware of where each line came from.

Everybody reads events through :class:`EventTail`: the judge (``read_events``, the whole folder once), the
runner's step observation and the progress view (new events every tick), the Slurm node watcher, and the
trainer's in-process attempt numbering. The policy (docs/events.md, "Reading the log"):

- a line is read once it is complete (its newline written), so a line being written is never half-read;
- a complete line must be an event: UTF-8, one JSON object, with the fields every event carries and those
  readers need of its kind (``problem`` below). One that is not is *malformed*: kept with its
  file and line number (``EventTail.malformed``); the live readers report it and go on, the judge
  (``read_events``) refuses the folder with :class:`MalformedEvents`;
- a line a killed writer left unfinished is *torn*, never an event and never an error: at the end of a run
  (``final=True``) a last line without its newline is skipped unless it parses whole, and a writer that
  opens a file ending in such a line first ends it with :data:`TORN` (``runlog.log``), so its own first
  event starts a line of its own and the torn one stays recognisable.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runlog import names
from runlog.layout import RunFolder, RunFolderError

_KINDS: dict[str, tuple[str, Any]] = {
    "str": ("a string", lambda v: isinstance(v, str)),
    "int": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "number": ("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
    "finite": ("a finite number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)),
    "list": ("a list", lambda v: isinstance(v, list)),
}

EVERY_EVENT = {"event": "str", "rank": "int", "attempt": "int", "mono": "finite"}
"""The fields every event carries, with their kinds (``EventLog`` writes them)."""
WHEN_GIVEN = {"pid": "int", "node": "str", "wall": "number"}
"""Fields every writer of this project writes, and a foreign writer may leave out; of their kind when given."""
NEEDED: dict[str, dict[str, str]] = {
    names.STEP: {"iteration": "int", "loss": "number"},
    names.CHECKPOINT_SAVE_BEGIN: {"iteration": "int"},
    names.CHECKPOINT_SAVE_END: {"iteration": "int"},
    names.CHECKPOINT_LOAD: {"iteration": "int"},
    names.CHECKPOINT_CORRUPT: {"path": "str"},
    names.LINK_RESTORED: {"fault_id": "str", "target_node": "str"},
    names.INPROCESS_START: {"inprocess_iteration": "int"},
    names.SIGNAL_SENT: {"signal": "str"},
    names.LEFTOVER: {"pids": "list"},
}
"""What readers (the judge, the live views) need of an event of each kind: a line without them is not one."""


def problem(record: Any) -> str | None:
    """Why a parsed JSON line is not an event, or None: the fields every event carries, of their kinds, and
    what readers need of its kind (NEEDED). Any other field is the writer's own."""
    if not isinstance(record, dict):
        return f"not an event (a JSON {type(record).__name__}, not an object)"
    missing = next((key for key in EVERY_EVENT if key not in record), None)
    if missing is not None:
        return f"not an event: no {missing!r}"
    name = record["event"]
    needed = NEEDED.get(name, {}) if isinstance(name, str) else {}
    for key, kind in {**EVERY_EVENT, **WHEN_GIVEN, **needed}.items():
        what, fits = _KINDS[kind]
        if key not in record:
            if key not in WHEN_GIVEN:
                return f"a {name} event needs {key!r} ({what})"
        elif not fits(record[key]):
            return f"{key!r} must be {what}, got {json.dumps(record[key])[:40]}"
    return None

Event = dict[str, Any]

TORN = b" # torn: its writer died mid-line"
"""The end a writer gives an unfinished last line it finds (a killed writer's), before its own first line."""


@dataclass(frozen=True)
class Malformed:
    """A complete line that is not an event, and where it is."""

    path: Path
    line: int | None
    """None: the file as a whole (it cannot be read)."""
    problem: str

    def __str__(self) -> str:
        return f"{self.path}{'' if self.line is None else f':{self.line}'}: {self.problem}"


class MalformedEvents(RunFolderError):
    """A run folder's event log has complete lines that are not events; the message names the first."""

    def __init__(self, found: list[Malformed]):
        more = f" (and {len(found) - 1} more malformed lines)" if len(found) > 1 else ""
        super().__init__(f"{found[0]}{more}")
        self.found = found


@dataclass
class LineTail:
    """The new complete lines of a growing file since the last call, numbered from 1 as in the file."""

    path: Path
    offset: int = 0
    partial: bytes = b""
    numbered: int = 0

    def lines(self) -> list[tuple[int, bytes]]:
        """(line number, bytes without the newline) of each line completed since the last call; a file not
        there (yet) has none, one that cannot be read raises OSError."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        *complete, self.partial = (self.partial + data).split(b"\n")
        first, self.numbered = self.numbered + 1, self.numbered + len(complete)
        return [(first + i, raw) for i, raw in enumerate(complete)]

    def rest(self) -> tuple[int, bytes] | None:
        """The unfinished last line, once the file is known to be complete (its writer is gone)."""
        if not self.partial:
            return None
        raw, self.partial = self.partial, b""
        self.numbered += 1
        return self.numbered, raw


@dataclass
class EventTail:
    """The events of a run folder's event files (``pattern`` in ``events/``) written since the last poll."""

    run_dir: Path
    pattern: str = "*.jsonl"
    malformed: list[Malformed] = field(default_factory=list)
    """Complete lines that were not events, in the order met (the module docstring says what is one)."""
    _tails: dict[Path, LineTail] = field(default_factory=dict)

    def poll(self, final: bool = False) -> list[Event]:
        """New events, file by file (sorted by name), each file's in its order; ``final``: the writers are
        gone, so a last line without its newline is read too (skipped if it is half an event)."""
        for path in RunFolder(Path(self.run_dir)).events.glob(self.pattern):
            self._tails.setdefault(path, LineTail(path))
        parsed = []
        for path in sorted(self._tails):
            tail = self._tails[path]
            try:
                lines = tail.lines()
            except OSError as e:
                self._unreadable(path, e)
                continue
            parsed += [self._parse(path, number, raw, unfinished=False) for number, raw in lines]
            rest = tail.rest() if final else None
            if rest is not None:
                parsed.append(self._parse(path, *rest, unfinished=True))
        return [e for e in parsed if e is not None]

    def _unreadable(self, path: Path, error: OSError) -> None:
        """A file that cannot be read is malformed as a whole (once, however often it is polled)."""
        if not any(m.path == path and m.line is None for m in self.malformed):
            self.malformed.append(Malformed(path, None, f"cannot read ({error.strerror or error})"))

    def _parse(self, path: Path, number: int, raw: bytes, unfinished: bool) -> Event | None:
        """The event of one line, or None: a blank or torn line, or a malformed one (recorded). An
        ``unfinished`` line (no newline, its writer gone) that does not parse is torn, not malformed."""
        if not raw.strip() or raw.endswith(TORN):
            return None
        try:
            record = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            wrong = None if unfinished else f"not UTF-8 text (byte {raw[e.start]:#04x} at column {e.start + 1})"
        except RecursionError:
            wrong = None if unfinished else "not JSON (nested too deeply)"
        except ValueError as e:  # json.JSONDecodeError, or a number too long to convert
            wrong = None if unfinished else f"not JSON ({getattr(e, 'msg', e)})"
        else:
            wrong = problem(record)
            if wrong is None:
                return record
        if wrong is not None:
            self.malformed.append(Malformed(path, number, wrong))
        return None


def read_events(run_dir: str | Path) -> list[Event]:
    """Every event of a finished run folder, ordered by ``mono``; a torn line is skipped. Raises
    :class:`MalformedEvents` when a complete line is not an event: a verdict is never computed from a log
    with lines it could not read."""
    tail = EventTail(Path(run_dir))
    events = tail.poll(final=True)
    if tail.malformed:
        raise MalformedEvents(tail.malformed)
    return sorted(events, key=lambda e: e["mono"])
