"""The typed records write the fields docs/events.md lists: renamed keywords, optional fields, flattened params."""

from __future__ import annotations

import json
from pathlib import Path

from runlog.log import EventLog
from runlog.records import CheckpointSaveEnd, ExitOnError, FaultInjected, Launched, Restart, SignalSent


def written(tmp_path: Path, record) -> dict:
    log = EventLog(tmp_path, "rank-0", rank=0, attempt=2, node="n0")
    log.write(record)
    log.close()
    (line,) = (tmp_path / "events" / "rank-0.jsonl").read_text().splitlines()
    return json.loads(line)


def test_every_event_carries_the_common_fields_and_its_own(tmp_path: Path) -> None:
    e = written(tmp_path, CheckpointSaveEnd(5, "/c/iter_0000005", 0.25, is_async=True))
    assert {k: e[k] for k in ("event", "rank", "attempt", "node")} == {"event": "checkpoint_save_end", "rank": 0, "attempt": 2, "node": "n0"}
    assert {"pid", "wall", "mono"} <= e.keys()
    assert (e["iteration"], e["path"], e["seconds"], e["async"]) == (5, "/c/iter_0000005", 0.25, True)
    assert "is_async" not in e


def test_optional_fields_are_left_out_while_none_and_override_the_log_when_set(tmp_path: Path) -> None:
    assert written(tmp_path / "a", Launched()).keys() == {"event", "rank", "attempt", "pid", "node", "wall", "mono"}
    e = written(tmp_path / "b", SignalSent("SIGKILL", 7, pid=7, attempt=3))
    assert (e["target"], e["pid"], e["attempt"]) == (7, 7, 3)
    assert written(tmp_path / "c", Restart("line", 2, node="node1"))["node"] == "node1"
    error = written(tmp_path / "d", ExitOnError("error", 1, None, "boom"))
    assert "diagnosis" not in error and error["iteration"] is None


def test_one_fault_record_for_every_writer_with_the_kinds_own_fields_beside(tmp_path: Path) -> None:
    rank = written(tmp_path / "rank", FaultInjected("rank_killed", "f0", "at step 7", 7, target_rank=1))
    assert {k: rank[k] for k in ("fault", "fault_id", "detail", "iteration", "target_rank")} == {
        "fault": "rank_killed", "fault_id": "f0", "detail": "at step 7", "iteration": 7, "target_rank": 1,
    }
    signal = written(tmp_path / "signal", FaultInjected(
        "sigterm", "f1", "all pids [1]", None, attempt=1, params={"target": "all", "grace_s": 4.0},
    ))
    assert (signal["target"], signal["grace_s"], signal["attempt"], signal["target_rank"]) == ("all", 4.0, 1, None)
    node = written(tmp_path / "node", FaultInjected("node_killed", "f2", "node1 pids []", None, target_node="node1"))
    assert (node["target_node"], node["target_rank"], node["iteration"]) == ("node1", None, None)
