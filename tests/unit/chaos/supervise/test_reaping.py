"""What makes a run's processes die with its runner, each part with real processes: the parent-death
signal of a launcher agent, the watchdog's sweep of the run's marker and sessions, and the temporary
folders a dead runner leaves (the whole of it, a SIGKILLed `chaos run`: tests/functional/test_boundaries.py)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

from chaos.supervise import deathsig, scratch
from chaos.supervise.procs import alive, marked_pids, start_time
from chaos.supervise.watchdog import Watchdog


def gone(pid: int, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < end:
        time.sleep(0.02)
    return not alive(pid)


def test_an_agent_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    """A stand-in runner starts a `sleep` through the wrapper, in its own session as agents are, then is
    SIGKILLed: the kernel kills the orphan at once."""
    code = textwrap.dedent(f"""
        import subprocess, sys
        sys.path.insert(0, {str(Path(deathsig.__file__).parents[2])!r})
        from chaos.supervise import deathsig
        agent = subprocess.Popen(deathsig.wrap(["sleep", "60"]), start_new_session=True)
        print(agent.pid, flush=True)
        agent.wait()
    """)
    runner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    agent = int(runner.stdout.readline())
    time.sleep(0.3)  # the wrapper has exec'd sleep by now
    assert alive(agent) and Path(f"/proc/{agent}/cmdline").read_bytes().startswith(b"sleep")
    runner.kill()
    runner.wait()
    assert gone(agent, 2), "the agent outlived its runner"


def test_the_wrapper_refuses_to_start_for_a_parent_already_gone() -> None:
    result = subprocess.run([sys.executable, deathsig.__file__, "1", "true"], capture_output=True, text=True)
    assert result.returncode == 1 and "died before the launch" in result.stderr


def test_the_watchdog_kills_the_runs_processes_and_their_sessions_and_removes_its_folder(tmp_path: Path) -> None:
    """A worker in its own session with a child that dropped the marker; a marked daemon that left every
    session: all gone once the runner's end of the pipe closes."""
    run_id = f"test-reap-{uuid.uuid4().hex[:8]}"
    folder = scratch.make_tmp_dir()
    code = textwrap.dedent("""
        import os, subprocess, sys, time
        child = subprocess.Popen(["sleep", "60"], env={"PATH": "/usr/bin:/bin"})  # no marker, same session
        daemon = subprocess.Popen(["sleep", "60"], start_new_session=True)  # marker, a session of its own
        print(child.pid, daemon.pid, flush=True)
        time.sleep(60)
    """)
    worker = subprocess.Popen([sys.executable, "-c", code], env={"PATH": "/usr/bin:/bin", "CHAOS_RUN_ID": run_id},
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    child, daemon = (int(x) for x in worker.stdout.readline().split())
    dog = Watchdog.start(run_id, folder)
    try:
        assert alive(child) and alive(daemon) and marked_pids(run_id) == sorted([worker.pid, daemon])
        dog.close()
        assert gone(worker.pid) and gone(child) and gone(daemon)
        assert not folder.exists()
    finally:
        for pid in (worker.pid, child, daemon):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        worker.wait()


def test_the_sweep_removes_the_folders_of_dead_owners_only() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    made = {name: Path(tempfile.mkdtemp(prefix=f"{scratch.PREFIX}test-{name}-")) for name in ("dead", "live", "none", "reused")}
    (made["dead"] / "owner").write_text(f"{dead.pid} 1\n")
    (made["live"] / "owner").write_text(f"{os.getpid()} {start_time(os.getpid())}\n")
    (made["reused"] / "owner").write_text(f"{os.getpid()} {start_time(os.getpid()) - 1}\n")  # the pid, another process
    try:
        swept = scratch.sweep_tmp_dirs()
        assert made["dead"] in swept and made["reused"] in swept
        assert made["live"].is_dir() and made["none"].is_dir()
    finally:
        for folder in made.values():
            shutil.rmtree(folder, ignore_errors=True)


def test_a_new_folder_names_its_owner() -> None:
    folder = scratch.make_tmp_dir()
    try:
        assert (folder / "owner").read_text().split() == [str(os.getpid()), str(start_time(os.getpid()))]
        assert folder not in scratch.sweep_tmp_dirs()
    finally:
        shutil.rmtree(folder)
