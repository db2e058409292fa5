"""The launch supervisor with real processes: a tiny Python program stands in for the launcher agent.

Each test starts real processes in their own sessions with the run's marker, and checks what the runner
relies on: launcher lines become events and move the attempt, the deadline and Ctrl-C kill everything,
leftovers are reported and reaped, and several agents make one job with one exit code.
"""

from __future__ import annotations

import os
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from chaos.supervise.attempts import AttemptTracker
from chaos.supervise.launch import Launch, LaunchResult, LaunchSpec
from chaos.supervise.procs import alive, marked_pids
from chaos.supervise.signals import LogSteps
from runlog.log import EventLog
from runlog.reader import read_events

FAILED = "[default] failed (exitcode: -9) local_rank: 1 (pid: 1234) of binary: python"
RESTART = "[default] Worker group FAILED. 3/3 attempts left; will restart worker group"
NEXT_ROUND_LINE = "The node 'localhost_1_0' attempts to join the next round of the rendezvous 'r'."


def program(code: str) -> list[str]:
    """A stand-in launcher: `code` run by this interpreter, with the c10d argument an agent's command has."""
    return [sys.executable, "-u", "-c", textwrap.dedent(code), "--rdzv-backend=c10d"]


def launch(
    tmp_path: Path, code: str, *, nodes: int = 1, deadline_s: float = 30, attempts: AttemptTracker | None = None,
    on_tick=None, on_line=None, during=None,
) -> tuple[Launch, LaunchResult]:
    """Run `code` as the launcher (one agent per node) to its end; `during(supervisor)` runs every tick."""
    run_id = f"test-launch-{uuid.uuid4().hex[:8]}"
    attempts = attempts or AttemptTracker()
    events = EventLog(tmp_path, "launcher", rank=-1, attempt=attempts.launcher)
    spec = LaunchSpec(program(code), env={"PATH": "/usr/bin:/bin"}, run_dir=tmp_path, deadline_s=deadline_s, run_id=run_id, nodes=nodes)
    supervisor = Launch(spec, events, attempts, on_line=on_line)
    supervisor.on_tick = on_tick or (lambda: during(supervisor) if during else None)
    try:
        return supervisor, supervisor.wait()
    finally:
        events.close()
        gone_by = time.monotonic() + 5  # a SIGKILL is delivered asynchronously
        while marked_pids(run_id) and time.monotonic() < gone_by:
            time.sleep(0.05)
        assert marked_pids(run_id) == [], "every process of the run is reaped"


def runner_events(tmp_path: Path) -> list[tuple]:
    return [(e["event"], e["attempt"], e.get("node")) for e in read_events(tmp_path) if e["rank"] == -1]


def test_launcher_lines_become_events_and_a_restart_line_moves_the_attempt(tmp_path: Path) -> None:
    _, result = launch(tmp_path, f"""
        print({FAILED!r})
        print({RESTART!r})
        print("bye")
        raise SystemExit(3)
    """)
    assert (result.exit_code, result.timed_out, result.leftovers) == (3, False, [])
    events = [(name, attempt) for name, attempt, _ in runner_events(tmp_path)]
    assert events == [("launch", 0), ("worker_failed", 0), ("restart", 1), ("launcher_exit", 1)]
    failed = next(e for e in read_events(tmp_path) if e["event"] == "worker_failed")
    assert (failed["exitcode"], failed["local_rank"], failed["line"]) == (-9, 1, FAILED)
    assert (tmp_path / "launcher.log").read_text().splitlines() == [FAILED, RESTART, "bye"]


def test_the_deadline_kills_the_launcher_and_what_it_started(tmp_path: Path) -> None:
    supervisor, result = launch(tmp_path, """
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print("started", flush=True)
        time.sleep(60)
    """, deadline_s=1.5)
    assert result.timed_out and result.exit_code != 0
    assert [e[0] for e in runner_events(tmp_path)][-2:] == ["deadline", "launcher_exit"]
    assert not alive(supervisor.agents[0].proc.pid)


def test_the_deadline_counts_from_the_first_step_not_from_the_launch(tmp_path: Path) -> None:
    """The start-up before the first step (a loaded machine's imports) is not counted: the launch is
    killed a deadline after its first step."""
    _, result = launch(tmp_path, f"""
        import json, os, time
        time.sleep(1.5)
        os.makedirs({str(tmp_path / "events")!r}, exist_ok=True)
        with open({str(tmp_path / "events" / "rank-0.jsonl")!r}, "a") as f:
            step = dict(event="step", rank=0, attempt=0, mono=time.monotonic(), iteration=1, loss=1.0)
            f.write(json.dumps(step) + "\\n")
        time.sleep(60)
    """, deadline_s=3.0)
    events = {e["event"]: e["mono"] for e in read_events(tmp_path)}
    assert result.timed_out
    assert events["step"] - events["launch"] >= 1.5
    assert events["deadline"] - events["step"] == pytest.approx(3.0, abs=0.6)  # counted from the launch: 1.5 at most
    assert result.counted_s == pytest.approx(3.0, abs=0.6)


def test_a_process_that_outlives_its_launcher_is_a_reaped_leftover(tmp_path: Path) -> None:
    _, result = launch(tmp_path, """
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        print(child.pid, flush=True)
    """)
    (pid,) = [int(x) for x in (tmp_path / "launcher.log").read_text().split()]
    assert (result.exit_code, result.leftovers) == (0, [pid])
    (left,) = [e for e in read_events(tmp_path) if e["event"] == "leftover"]
    assert left["commands"] == [f"{sys.executable} -c import time; time.sleep(60)"]
    assert not alive(pid)


def test_ctrl_c_stops_the_launch_and_still_reaps(tmp_path: Path) -> None:
    def interrupt() -> None:
        if (tmp_path / "launcher.log").exists() and "ready" in (tmp_path / "launcher.log").read_text():
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        launch(tmp_path, """
            import time
            print("ready", flush=True)
            time.sleep(60)
        """, on_tick=interrupt)
    assert [e[0] for e in runner_events(tmp_path)][-1] == "launcher_exit"


def test_a_step_printed_between_the_restart_line_and_the_next_rendezvous_is_the_last_attempts(tmp_path: Path) -> None:
    """The agent logs its restart decision, then stops the surviving workers: rank 0 may print its step 3 after
    the restart line. Only the rendezvous line says the last round's workers are gone."""
    attempts = AttemptTracker()
    steps = LogSteps(tmp_path, r"^step (?P<step>\d+) loss (?P<loss>\S+)")
    launch(tmp_path, f"""
        for line in ["step 1 loss 2.5", "step 2 loss 2.0", {RESTART!r}, "step 3 loss 1.8", {NEXT_ROUND_LINE!r},
                     "step 2 loss 2.0", "step 3 loss 1.8"]:
            print(line)
    """, attempts=attempts, on_line=steps.line)
    assert steps.poll() == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3)]
    steps.close()
    observed = [(e["attempt"], e["iteration"], e["loss"], e["observed"]) for e in read_events(tmp_path) if e["event"] == "step"]
    assert observed == [(0, 1, 2.5, True), (0, 2, 2.0, True), (0, 3, 1.8, True), (1, 2, 2.0, True), (1, 3, 1.8, True)]
    assert [e[1] for e in runner_events(tmp_path) if e[0] == "launcher_exit"] == [1], "the runner's own events move at the restart line"


def test_several_agents_are_one_job_with_the_first_failure_as_its_code(tmp_path: Path) -> None:
    _, result = launch(tmp_path, f"""
        import os, sys
        node = os.environ["CHAOS_NODE_ID"]
        print(node, os.environ["CHAOS_ATTEMPT_BASE"], *sys.argv[1:])
        print({RESTART!r})
        raise SystemExit(0 if node == "node0" else 5)
    """, nodes=2)
    assert result.exit_code == 5
    events = runner_events(tmp_path)
    assert [e[0] for e in events[:3]] == ["launch", "agent_start", "agent_start"]
    assert sorted(e[2] for e in events if e[0] in ("restart", "agent_exit")) == ["node0", "node0", "node1", "node1"]
    assert [e[1] for e in events if e[0] == "launcher_exit"] == [1], "two agents restarting into round 1 are one attempt"
    for node, is_host in (("node0", "true"), ("node1", "false")):
        first = (tmp_path / f"launcher-{node}.log").read_text().splitlines()[0]
        assert first == f"{node} 0 --rdzv-backend=c10d --rdzv-conf=is_host={is_host}"


def test_a_lost_agents_code_is_the_fault_not_the_jobs(tmp_path: Path) -> None:
    def kill_node1(supervisor: Launch) -> None:
        node1 = next(a for a in supervisor.agents if a.node == "node1")
        if node1.proc.poll() is None and "up" in (tmp_path / "launcher-node1.log").read_text():
            supervisor.lose("node1")
            node1.proc.kill()

    _, result = launch(tmp_path, """
        import os, time
        print("up", flush=True)
        if os.environ["CHAOS_NODE_ID"] == "node1":
            time.sleep(60)
    """, nodes=2, during=kill_node1)
    exits = {e["node"]: (e["code"], e["lost"]) for e in read_events(tmp_path) if e["event"] == "agent_exit"}
    assert exits == {"node0": (0, False), "node1": (-9, True)}
    assert result.exit_code == 0


def test_only_live_agents_process_groups_are_signalled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """node1's agent exits and is reaped long before the deadline: its pid may be another process group's
    by then (pids wrap), so the deadline's kill goes to node0's group and the run's marker, never to it."""
    real, groups = os.killpg, []

    def record(pgid: int, sig: int) -> None:
        groups.append(pgid)
        real(pgid, sig)

    monkeypatch.setattr(os, "killpg", record)
    supervisor, result = launch(tmp_path, """
        import os, time
        print("up", flush=True)
        if os.environ["CHAOS_NODE_ID"] == "node0":
            time.sleep(60)
    """, nodes=2, deadline_s=3)
    node0, node1 = (a.proc.pid for a in supervisor.agents)
    assert result.timed_out and groups and set(groups) == {node0}, (groups, node0, node1)
