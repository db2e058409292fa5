"""The Slurm path: the sbatch script's content, and judging a finished run folder from its files alone."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from chaos.schema.scenario import ScenarioError, load_scenario
from chaos.supervise.runner import judge_run_dir
from chaos.supervise.slurm import sbatch_script
from runlog.layout import RunFolder
from runlog.log import EventLog

ROOT = Path(__file__).resolve().parents[4]
SCENARIOS = ROOT / "scenarios"


def script(name: str) -> str:
    return sbatch_script(load_scenario(SCENARIOS / f"{name}.yaml"), "/shared/runs")


def srun_task(text: str) -> str:
    """The command each srun task runs (the `bash -c` argument, unquoted as the batch shell reads it)."""
    line = text[text.index("srun ") : text.index("\nCODE=$?\npython")]
    return shlex.split(line)[-1]


def test_rank_killed_runs_one_agent_on_one_node_with_the_plan_on_shared_storage() -> None:
    text = script("rank_killed")
    assert "#SBATCH --nodes=1\n" in text and "#SBATCH --ntasks-per-node=1\n" in text
    assert 'RUN_DIR="/shared/runs/rank_killed-$SLURM_JOB_ID"' in text
    assert "srun --nodes=1 --ntasks-per-node=1" in text
    assert "--nnodes=1 --nproc-per-node=2 --max-restarts=3" in text
    task = srun_task(text)
    assert '--rdzv-endpoint="$HEAD:$PORT"' in task and 'is_host="$IS_HOST"' in task
    assert "fault_injection.component=chaos fault_injection.plan='\"$RUN_DIR\"'/plan.json" in task
    plan = json.loads(text.split('cat > "$RUN_DIR/plan.json" <<\'CHAOS_EOF\'\n')[1].split("\nCHAOS_EOF")[0])
    assert plan["faults"] == [
        {"fault_id": "f0", "type": "rank_killed", "rank": 1, "attempt": 0, "at_step": 7, "delay_s": None}
    ]
    copy = yaml.safe_load(text.split('cat > "$RUN_DIR/scenario.yaml" <<\'CHAOS_EOF\'\n')[1].split("\nCHAOS_EOF")[0])
    assert copy["name"] == "rank_killed" and copy["seed"] == 0


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("name", ["rank_killed", "node_hung_2x1", "node_killed_hot_spare"])
def test_the_script_and_its_srun_task_are_valid_bash(name: str, tmp_path: Path) -> None:
    path = tmp_path / "job.sbatch"
    path.write_text(script(name))
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True).stderr == ""


def test_a_two_node_scenario_gets_a_watcher_per_node_and_waiting_spares() -> None:
    text = script("node_killed_hot_spare")
    assert "#SBATCH --nodes=3\n" in text and "srun --nodes=3" in text
    assert "--nnodes=2 --nproc-per-node=1" in text
    task = srun_task(text)
    assert 'python -m chaos.supervise.slurm watch "$RUN_DIR" "$CHAOS_NODE_ID" &' in task
    assert 'if [ "$SLURM_NODEID" -ge 2 ]; then' in task


def test_node_rejoin_has_no_cluster_form() -> None:
    with pytest.raises(ScenarioError, match="node_rejoin needs a new allocation on Slurm; use spares"):
        script("node_killed_2x1")


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


def test_a_spare_waits_for_the_first_step_through_the_event_reader(tmp_path: Path) -> None:
    assert 'python -m chaos.supervise.slurm wait-for-step "$RUN_DIR"' in srun_task(script("node_killed_hot_spare"))
    waiter = subprocess.Popen([sys.executable, "-m", "chaos.supervise.slurm", "wait-for-step", str(tmp_path)], cwd=ROOT)
    try:
        log = EventLog(tmp_path, "rank-0", rank=0, attempt=0)
        log.emit("run_start")
        with pytest.raises(subprocess.TimeoutExpired):
            waiter.wait(timeout=2)
        log.emit("step", iteration=1, loss=1.0)
        assert waiter.wait(timeout=120) == 0
    finally:
        waiter.kill()
        waiter.wait()
