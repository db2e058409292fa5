"""The one event reader: incremental, never reads half a line, and knows where a bad line is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runlog.log import EventLog
from runlog.reader import TORN, EventTail, LineTail, MalformedEvents, read_events


def line(event: str, mono: float, **fields) -> str:
    """An event line; a step has what readers need of one (iteration, loss) unless `fields` say otherwise."""
    needed = {"iteration": 1, "loss": 1.0} if event == "step" else {}
    return json.dumps({"event": event, "rank": 0, "attempt": 0, "mono": mono, **needed, **fields}) + "\n"


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
        f"{path}:3: not an event: no 'event'",
    ]


BAD_LINES = {
    "not UTF-8": (b'{"event": "step", "caf\xe9": 1}', "not UTF-8 text (byte 0xe9 at column 23)"),
    "an array": (b"[1, 2]", "not an event (a JSON list, not an object)"),
    "no rank": (b'{"event": "exit", "attempt": 0, "mono": 1.0}', "not an event: no 'rank'"),
    "rank a string": (b'{"event": "exit", "rank": "0", "attempt": 0, "mono": 1.0}', "'rank' must be an integer, got \"0\""),
    "rank a bool": (b'{"event": "exit", "rank": true, "attempt": 0, "mono": 1.0}', "'rank' must be an integer, got true"),
    "mono NaN": (b'{"event": "exit", "rank": 0, "attempt": 0, "mono": NaN}', "'mono' must be a finite number, got NaN"),
    "event a number": (b'{"event": 5, "rank": 0, "attempt": 0, "mono": 1.0}', "'event' must be a string, got 5"),
    "node a list": (b'{"event": "exit", "rank": 0, "attempt": 0, "mono": 1.0, "node": []}', "'node' must be a string"),
    "step without iteration": (b'{"event": "step", "rank": 0, "attempt": 0, "mono": 1.0, "loss": 1}', "a step event needs 'iteration' (an integer)"),
    "step with a string loss": (
        b'{"event": "step", "rank": 0, "attempt": 0, "mono": 1.0, "iteration": 1, "loss": "1.0"}', "'loss' must be a number",
    ),
    "nested too deeply": (b"[" * 100_000 + b"]" * 100_000, "not JSON (nested too deeply)"),
}


@pytest.mark.parametrize(("raw", "expected"), BAD_LINES.values(), ids=BAD_LINES.keys())
def test_a_complete_line_that_is_not_an_event_is_malformed_and_the_judge_refuses_the_log(
    tmp_path: Path, raw: bytes, expected: str
) -> None:
    path = tmp_path / "events" / "rank-0.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(line("step", 1.0).encode() + raw + b"\n" + line("step", 2.0).encode())
    tail = EventTail(tmp_path)
    assert [e["mono"] for e in tail.poll()] == [1.0, 2.0]
    assert len(tail.malformed) == 1 and str(tail.malformed[0]).startswith(f"{path}:2: {expected}")
    with pytest.raises(MalformedEvents) as refused:
        read_events(tmp_path)
    assert str(refused.value).startswith(f"{path}:2: {expected}")


def test_the_judge_names_the_first_malformed_line_and_counts_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "events" / "launcher.jsonl"
    write(path, "x\n" + line("launch", 1.0) + "y\nz\n")
    with pytest.raises(MalformedEvents, match=r"launcher.jsonl:1: not JSON \(Expecting value\) \(and 2 more malformed lines\)$"):
        read_events(tmp_path)


def test_an_events_file_that_cannot_be_read_is_malformed_as_a_whole(tmp_path: Path) -> None:
    (tmp_path / "events" / "rank-1.jsonl").mkdir(parents=True)
    write(tmp_path / "events" / "rank-0.jsonl", line("step", 1.0))
    tail = EventTail(tmp_path)
    assert len(tail.poll()) == 1 and len(tail.poll()) == 0
    assert [str(m) for m in tail.malformed] == [f"{tmp_path / 'events' / 'rank-1.jsonl'}: cannot read (Is a directory)"]
    with pytest.raises(MalformedEvents, match="rank-1.jsonl: cannot read"):
        read_events(tmp_path)


def test_a_writer_ends_the_line_a_killed_writer_left_unfinished(tmp_path: Path) -> None:
    """Killed mid-line, then restarted on the same file: the torn half stays a line of its own, never an
    error, and the new writer's events are whole (read live as they come, and by the judge)."""
    path = tmp_path / "events" / "rank-0.jsonl"
    write(path, line("step", 1.0) + line("step", 2.0)[:17])
    live = EventTail(tmp_path)
    assert [e["mono"] for e in live.poll()] == [1.0]
    log = EventLog(tmp_path, "rank-0", rank=0, attempt=1)
    log.emit("run_start")
    log.close()
    assert path.read_bytes().splitlines()[1] == line("step", 2.0)[:17].encode() + TORN
    assert [e["event"] for e in live.poll()] == ["run_start"] and live.malformed == []
    assert [e["event"] for e in read_events(tmp_path)] == ["step", "run_start"]
    EventLog(tmp_path, "rank-0", rank=0).close()  # a file that ends whole is left as it is
    assert path.read_bytes().count(TORN) == 1


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
    assert tail.lines() == [(1, b"a")]
    write(path, "\nc\n")
    assert tail.lines() == [(2, b"b"), (3, b"c")]
    assert tail.rest() is None
