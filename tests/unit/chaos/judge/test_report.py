"""Journal (atomic write, re-read), timeline picture and summary of a synthetic rank_killed run folder."""

from __future__ import annotations

import json

import pytest

from chaos.judge.report import build_journal, format_summary, plot_timeline, write_journal
from chaos.judge.timeline import load_run
from chaos.judge.verdicts import judge
from chaos.schema.loader import parse_scenario
from runlog.log import EventLog

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SCENARIO = parse_scenario(
    {
        "name": "rank_killed",
        "description": "rank 1 is killed at step 7 and training resumes from step 5",
        "world_size": 2,
        "trainer": {"train.train_iters": 12, "checkpoint.save_interval": 5},
        "faults": [{"type": "rank_killed", "rank": 1, "at_step": 7}],
        "expect": {"exit_code": 0, "restarts": 1, "resumed_from_step": 5, "lost_steps": {"max": 0}},
    },
    "test",
)


def emit_steps(logs: list[EventLog], first: int, last: int) -> None:
    for i in range(first, last + 1):
        for log in logs:
            log.emit("step", iteration=i, loss=5.0 / i, lr=1e-3, step_time=0.001, consumed_samples=8 * i)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """Real event files: attempt 0 steps 1..6, fault before 7, restart, load step 5, steps 6..12."""
    folder = tmp_path_factory.mktemp("rank_killed")
    runner = EventLog(folder, "launcher", rank=-1, attempt=0)
    runner.emit("launch", command="ft_launcher ...", launcher="ft_launcher", world_size=2, ports=[29500])
    first = [EventLog(folder, f"rank-{r}", rank=r, attempt=0) for r in (0, 1)]
    for log in first:
        log.emit("run_start", world_size=2, versions={"torch": "2.13", "python": "3.11"})
    emit_steps(first, 1, 5)
    first[0].emit("checkpoint_save_end", iteration=5, path="ckpt/iter_5", seconds=0.01, **{"async": False})
    emit_steps(first, 6, 6)
    first[1].emit("fault_injected", fault="rank_killed", target_rank=1, iteration=7, fault_id="f0", detail="")
    runner.emit("worker_failed", local_rank=1, exitcode=-9, line="worker 1 died")
    runner.emit("restart", attempts_left=2, line="restarting")
    second = [EventLog(folder, f"rank-{r}", rank=r, attempt=1) for r in (0, 1)]
    for log in second:
        log.emit("run_start", world_size=2)
        log.emit("checkpoint_load", iteration=5, path="ckpt/iter_5", seconds=0.01)
    emit_steps(second, 6, 12)
    second[0].emit("exit", reason="completed", code=0, iteration=12)
    runner.emit("launcher_exit", code=0)
    for log in (runner, *first, *second):
        log.close()
    return folder


@pytest.fixture(scope="module")
def journal(run_dir):
    timeline, metrics = load_run(run_dir)
    verdicts = judge(SCENARIO.expect, metrics)
    return build_journal(SCENARIO, run_dir, timeline, metrics, verdicts, {"picture": "timeline.png"},
                         scenario_file="scenarios/rank_killed.yaml")


def test_journal_contents(journal, run_dir):
    assert journal["schema_version"] == 1
    assert journal["scenario"]["file"] == "scenarios/rank_killed.yaml"
    (fault,) = journal["scenario"]["faults"]
    assert (fault["type"], fault["rank"], fault["at_step"]) == ("rank_killed", 1, 7)
    assert journal["run_dir"] == str(run_dir)
    assert journal["versions"] == {"torch": "2.13", "python": "3.11"}
    assert journal["metrics"]["resumed_from_step"] == 5 and journal["metrics"]["lost_steps"] == 1
    assert journal["timeline"][0]["event"] == "launch"
    assert journal["picture"] == "timeline.png", "extra keys are merged in"


def test_journal_status_fails_when_any_verdict_fails(journal):
    verdicts = {v["name"]: v for v in journal["verdicts"]}
    assert verdicts["exit_code"]["passed"] and verdicts["resumed_from_step"]["passed"]
    assert not verdicts["lost_steps"]["passed"]
    assert verdicts["lost_steps"]["message"] == "lost_steps: expected <= 0, observed 1"
    assert journal["status"] == "failed"


def test_journal_write_is_atomic_and_rereads_equal(journal, tmp_path):
    path = write_journal(tmp_path / "out" / "journal.json", journal)
    assert json.loads(path.read_text()) == journal
    with pytest.raises(TypeError):
        write_journal(path, {"broken": object()})
    assert json.loads(path.read_text()) == journal, "a failed write leaves the old journal whole"
    assert [p.name for p in path.parent.iterdir()] == ["journal.json"], "no temp file is left behind"


def test_plot_writes_a_png(run_dir, tmp_path):
    timeline, metrics = load_run(run_dir)
    out = plot_timeline(run_dir, timeline, metrics, tmp_path / "timeline.png", name="rank_killed", status="failed")
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 20_000


def test_plot_of_a_run_without_fault_or_steps(tmp_path):
    EventLog(tmp_path, "launcher", rank=-1).emit("launch", command="x", launcher="torchrun", world_size=1, ports=[])
    timeline, metrics = load_run(tmp_path)
    assert plot_timeline(tmp_path, timeline, metrics, tmp_path / "p.png").read_bytes().startswith(PNG_MAGIC)


def test_summary_lines(journal, run_dir):
    summary = format_summary(journal)
    assert summary.splitlines()[0] == "rank_killed: FAILED"
    assert "  ok   exit_code: expected == 0, observed 0" in summary
    assert "  FAIL lost_steps: expected <= 0, observed 1" in summary
    assert f"run folder: {run_dir}" in summary and "picture:    timeline.png" in summary
