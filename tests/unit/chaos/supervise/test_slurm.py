"""The Slurm path's pure logic, its refusals through the CLI, and judging a finished run folder; the jobs
themselves run on a real Slurm in tests/slurm (a broken job fails there, through the run it breaks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from chaos.schema.loader import load_scenario
from chaos.supervise.ports import RANGE
from chaos.supervise.runner import judge_run_dir
from chaos.supervise.slurm_job import next_attempt, parse_record, rdzv_port
from runlog.layout import RunFolder
from runlog.log import EventLog

ROOT = Path(__file__).resolve().parents[4]
SCENARIOS = ROOT / "scenarios"


def test_jobs_less_than_2500_ids_apart_get_disjoint_port_blocks() -> None:
    ports = sorted(rdzv_port(job) for job in range(1000, 3500))
    assert all(b - a >= 3 for a, b in zip(ports, ports[1:], strict=False))  # a block: rendezvous, store, spare
    assert ports[-1] + 2 < RANGE[0]  # below the local runner's ports


def test_a_requeued_job_numbers_its_attempts_on_past_everything_seen(event) -> None:
    assert next_attempt([]) == 0
    first = [
        event("launch", 1.0, rank=-1, attempt=0),
        event("step", 2.0, rank=0, attempt=0),
        event("run_start", 3.0, rank=1, attempt=2),  # two in-job restarts in the first job launch
    ]
    assert next_attempt(first) == 3
    assert next_attempt([event("step", 2.0, attempt=4)]) == 0  # no job launched here before


def test_scontrol_one_line_records_read_as_fields() -> None:
    line = ("JobId=7 JobName=chaos-x UserId=root(0) JobState=COMPLETED Reason=None Requeue=1 Restarts=1 ExitCode=0:0 "
            "EndTime=2026-12-01T09:55:16 NodeList=vm-n[0-1] NodeAddr=127.0.0.1")
    record = parse_record(line)
    assert (record["JobState"], record["ExitCode"], record["Restarts"], record["NodeList"]) == ("COMPLETED", "0:0", "1", "vm-n[0-1]")


def test_the_job_steps_and_the_agent_wrapper_import_no_torch() -> None:
    """They run before, after and beside the job's work on every node: no 2 s of torch imports each."""
    probe = "import sys, chaos.supervise.slurm_job, chaos.supervise.slurm_agent; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.stdout.strip() == "False", done.stderr


def _chaos(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chaos", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.mark.parametrize(("name", "problem"), [
    ("node_killed_2x1", "node_rejoin needs a new allocation on Slurm; use spares"),
    ("sigterm_all", "sigterm is sent by the local runner; on Slurm use slurm.preempt_time_s"),
    ("external_script_killed", "faults[0]: sigkill is sent by the local runner"),
    ("nan_persistent", "a persistent loss fault names the planning host's node"),
])
def test_what_a_slurm_job_cannot_do_is_refused_before_anything_is_written(name: str, problem: str, tmp_path: Path) -> None:
    done = _chaos("slurm", name, "--out", str(tmp_path))
    assert done.returncode == 2 and problem in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_slurm_scenario_is_refused_by_the_local_runner(tmp_path: Path) -> None:
    done = _chaos("run", "slurm_requeue", "--out", str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert "slurm_requeue runs as a Slurm job (requires: slurm): nox -s slurm, or python -m chaos run --slurm slurm_requeue" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_judge_reads_a_finished_run_folder_alone(tmp_path: Path, run_logs) -> None:
    catalogued = load_scenario(SCENARIOS / "node_killed_hot_spare.yaml")
    scenario = catalogued.replace(expect={**catalogued.expect.model_dump(exclude_none=True), "baseline": None})
    RunFolder(tmp_path).scenario.write_text(yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))
    runner = run_logs.log("runner", rank=-1)
    runner.emit("launch")
    logs = {r: run_logs.rank(r, node=f"node{r}") for r in (0, 1)}
    for log in logs.values():
        log.emit("run_start", world_size=2)
    for step in range(1, 9):
        for log in logs.values():
            log.emit("step", iteration=step, loss=1.0, step_time=0.1)
        if step == 5:
            logs[0].emit("checkpoint_save_end", iteration=5)
    runner.emit("fault_injected", fault="node_killed", target_node="node1", iteration=8)
    logs[0].emit("exit", reason="error", code=1, iteration=8)
    runner.emit("restart", attempts_left=3, node="node0", attempt=1)
    again = {0: run_logs.rank(0, attempt=1, node="node0"), 1: run_logs.rank(1, attempt=1, node="node2")}
    for log in again.values():
        log.emit("run_start", world_size=2)
    again[0].emit("checkpoint_load", iteration=5)
    for step in range(6, 13):
        for log in again.values():
            log.emit("step", iteration=step, loss=1.0, step_time=0.1)
    runner.emit("launcher_exit", code=0)
    outcome = judge_run_dir(tmp_path)
    failed = [v["name"] for v in outcome.journal["verdicts"] if not v["passed"]]
    assert failed == [] and outcome.passed
    assert (tmp_path / "journal.json").is_file()


def test_a_spare_waits_for_a_step_of_its_own_job_launch(tmp_path: Path) -> None:
    """A requeued job's spare must not take the first launch's steps for its own round's (attempt base 1)."""
    EventLog(tmp_path, "rank-0", rank=0, attempt=0).emit("step", iteration=1, loss=1.0)  # the first launch's
    probe = "import sys; from chaos.supervise.slurm_agent import wait_for_training; wait_for_training(sys.argv[1], 1, 0.1)"
    waiter = subprocess.Popen([sys.executable, "-c", probe, str(tmp_path)], cwd=ROOT)
    try:
        log = EventLog(tmp_path, "rank-0", rank=0, attempt=1)
        log.emit("run_start")
        with pytest.raises(subprocess.TimeoutExpired):
            waiter.wait(timeout=3)
        log.emit("step", iteration=1, loss=1.0)
        assert waiter.wait(timeout=60) == 0
    finally:
        waiter.kill()
        waiter.wait()


def test_judging_a_job_that_never_ran_says_so_in_one_line_and_trains_nothing(tmp_path: Path) -> None:
    """`chaos slurm` writes the job; judged before it is submitted, `chaos judge` says the job never ran and
    exits 4, with no baseline trained (it used to train one, 11 s, then report BROKEN with
    `ok deadline: observed finished`)."""
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "CHAOS_CACHE_DIR": str(tmp_path / "cache"),
           "HOME": str(tmp_path)}

    def chaos(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "chaos", *argv], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)

    wrote = chaos("slurm", "rank_killed", "--out", str(tmp_path / "runs"))
    assert wrote.returncode == 0, wrote.stderr
    (folder,) = (tmp_path / "runs").iterdir()
    for argv in (("judge", str(folder)), ("judge", str(folder), "--json")):
        judged = chaos(*argv)
        assert (judged.returncode, judged.stdout) == (4, ""), judged.stderr
        assert judged.stderr == (f"chaos: {folder}: the job never ran: no launch in its events, nothing to judge; "
                                 f"submit it with sbatch {folder / 'job.sbatch'} (a job still queued has not started yet)\n")
    assert not (tmp_path / "cache").exists() and not (folder / "journal.json").exists()
    EventLog(folder, "launcher", rank=-1).emit("submit", job_id="17", script=str(folder / "job.sbatch"))
    submitted = chaos("judge", str(folder))
    assert submitted.returncode == 4 and submitted.stderr.count("\n") == 1, submitted.stderr
    assert "the job never ran" in submitted.stderr and "it was submitted" in submitted.stderr
