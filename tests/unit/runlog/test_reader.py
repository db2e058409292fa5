"""The one event reader: incremental, never reads half a line, and knows where a bad line is."""

from __future__ import annotations

import json
from pathlib import Path

from runlog.reader import EventTail, LineTail, read_events


def line(event: str, mono: float, **fields) -> str:
    return json.dumps({"event": event, "rank": 0, "attempt": 0, "mono": mono, **fields}) + "\n"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(text)


def test_a_line_is_read_once_it_is_complete(tmp_path: Path) -> None:
    rank0 = tmp_path / "events" / "rank-0.jsonl"
    tail = EventTail(tmp_path)
    assert tail.poll() == []  # no folder yet
    whole = line("step", 1.0, iteration=1)
    write(rank0, whole + whole[:10])
    assert [e["iteration"] for e in tail.poll()] == [1]
    write(rank0, whole[10:].replace('"mono": 1.0', '"mono": 2.0'))
    assert [e["mono"] for e in tail.poll()] == [2.0]
    assert tail.poll() == []


def test_new_files_are_found_and_read_in_name_order(tmp_path: Path) -> None:
    tail = EventTail(tmp_path, "rank-*.jsonl")
    write(tmp_path / "events" / "rank-1.jsonl", line("step", 1.0))
    assert len(tail.poll()) == 1
    write(tmp_path / "events" / "rank-0.jsonl", line("step", 2.0))
    write(tmp_path / "events" / "launcher.jsonl", line("launch", 0.5))
    assert [e["mono"] for e in tail.poll()] == [2.0]


def test_malformed_lines_are_skipped_and_kept_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "events" / "rank-0.jsonl"
    write(path, line("step", 1.0) + "{not json\n" + json.dumps({"no": "event"}) + "\n" + line("step", 2.0))
    tail = EventTail(tmp_path)
    assert [e["mono"] for e in tail.poll()] == [1.0, 2.0]
    assert [str(m) for m in tail.malformed] == [
        f"{path}:2: not JSON (Expecting property name enclosed in double quotes)",
        f"{path}:3: not an event (no 'event' and 'mono')",
    ]


def test_at_the_end_a_last_line_without_newline_counts_if_whole_and_is_no_error_if_torn(tmp_path: Path) -> None:
    write(tmp_path / "events" / "rank-0.jsonl", line("step", 2.0) + line("exit", 3.0).rstrip("\n"))
    write(tmp_path / "events" / "rank-1.jsonl", line("step", 1.0) + line("step", 4.0)[:-9])
    tail = EventTail(tmp_path)
    assert [e["event"] for e in sorted(tail.poll(final=True), key=lambda e: e["mono"])] == ["step", "step", "exit"]
    assert tail.malformed == []
    assert [e["mono"] for e in read_events(tmp_path)] == [1.0, 2.0, 3.0]


def test_line_numbers_count_across_reads(tmp_path: Path) -> None:
    path = tmp_path / "log"
    write(path, "a\nb")
    tail = LineTail(path)
    assert tail.lines() == [(1, "a")]
    write(path, "\nc\n")
    assert tail.lines() == [(2, "b"), (3, "c")]
    assert tail.rest() is None
