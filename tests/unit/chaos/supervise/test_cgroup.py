"""The run's memory cgroup: the kernel's OOM killer ends what grows in it (and nothing else), the kill is read
from the cgroup's own counter as an oom_kill event, and the cgroup is removed, or swept once its runner died."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.supervise import cgroup
from runlog.log import EventLog

WHERE = cgroup.hierarchy()
pytestmark = pytest.mark.skipif(isinstance(WHERE, str), reason=f"no memory cgroup of our own here: {WHERE}")
GROW = "import sys; sys.stdin.readline(); chunks = [bytearray(b'x') * (1 << 20) for _ in range(512)]"


def test_what_grows_in_the_cgroup_is_oom_killed_and_the_watch_names_it(tmp_path: Path) -> None:
    group = cgroup.MemoryCgroup.create(WHERE, "t-oom", 16 << 20)
    try:
        child = subprocess.Popen([sys.executable, "-c", GROW], stdin=subprocess.PIPE, text=True)
        (group.path / "cgroup.procs").write_text(str(child.pid))
        joined = {"event": "fault_injected", "rank": 1, "attempt": 0, "pid": child.pid, "mono": 0.0, "fault": "host_oom"}
        (tmp_path / "events").mkdir()
        (tmp_path / "events" / "rank-1.jsonl").write_text(json.dumps(joined) + "\n")  # as the rank writes it, with its pid
        runner = EventLog(tmp_path, "launcher", rank=-1, attempt=0)
        watch = cgroup.OomWatch(group, tmp_path, runner)
        assert group.pids() == [child.pid]
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.wait(20) == -9
        watch.tick()
        runner.close()
        assert group.oom_kills() == 1
        (kill,) = [json.loads(line) for line in (tmp_path / "events" / "launcher.jsonl").read_text().splitlines()]
        assert (kill["event"], kill["target"], kill["target_rank"], kill["oom_kills"]) == ("oom_kill", child.pid, 1, 1)
        assert os.getpid() not in group.pids(), "the test's own process was never in it"
    finally:
        group.remove()
    assert not group.path.exists() and cgroup.of_run("t-oom") == []


def test_the_sweep_removes_a_dead_runners_cgroup_and_keeps_a_live_ones() -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = WHERE.parent / f"{cgroup.PREFIX}{dead.stdout.strip()}-1-t-orphan"
    orphan.mkdir()
    mine = cgroup.MemoryCgroup.create(WHERE, "t-live", 16 << 20)
    try:
        assert orphan in cgroup.sweep()
        assert not orphan.exists() and mine.path.exists()
    finally:
        mine.remove()
        cgroup.remove_run("t-orphan")
