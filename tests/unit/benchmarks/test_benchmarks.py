"""Benchmark quantities from hand-built events, and the shape (never the timings) of the quick benchmark."""

from __future__ import annotations

import pytest

from benchmarks import measure
from benchmarks.report import markdown_table
from chaos.judge.timeline import compute_metrics
from chaos.schema.loader import parse_scenario


def ev(event: str, mono: float, rank: int = 0, attempt: int = 0, **fields) -> dict:
    return {"event": event, "mono": mono, "rank": rank, "attempt": attempt, "pid": 1, "node": "n", "wall": mono, **fields}


def rank_killed_story() -> list[dict]:
    """Rank 1 killed before step 7 (rank 0's events only, plus the runner's); resumed from step 5."""
    steps = [ev("step", 101.0 + 0.1 * (i - 1), iteration=i, loss=1.0, step_time=0.1) for i in range(1, 7)]
    return [
        ev("launch", 100.0, rank=-1), ev("run_start", 100.5), *steps,
        ev("fault_injected", 101.7, rank=1, fault="rank_killed", target_rank=1, iteration=7),
        ev("worker_failed", 102.0, rank=-1, local_rank=1, exitcode=-9),
        ev("restart", 102.1, rank=-1, attempt=1, attempts_left=2),
        ev("run_start", 103.0, attempt=1),
        ev("checkpoint_load", 103.2, attempt=1, iteration=5, path="ckpt/iter_5", seconds=0.15),
        ev("step", 103.5, attempt=1, iteration=6, loss=1.0, step_time=0.1),
        ev("launcher_exit", 105.5, rank=-1, attempt=1, code=0),
    ]


def test_recovery_breakdown_splits_time_to_recover_at_the_events():
    events = rank_killed_story()
    parts = measure.recovery_breakdown(events, compute_metrics(events))
    assert parts is not None
    assert parts.detect == pytest.approx(0.3)  # fault 101.7 → worker_failed 102.0
    assert parts.teardown == pytest.approx(0.1)  # → restart 102.1
    assert parts.rendezvous_import == pytest.approx(0.9)  # → run_start 103.0
    assert parts.build == pytest.approx(0.05)  # → load begins 103.05 (ends 103.2 after 0.15 s)
    assert parts.checkpoint_load == pytest.approx(0.15)
    assert parts.first_step == pytest.approx(0.3)  # → first step 103.5
    assert parts.total == pytest.approx(compute_metrics(events).time_to_recover_s)


def test_start_cost_and_recomputed_time():
    events = rank_killed_story()
    cost = measure.start_cost(events)
    assert cost is not None
    assert (cost.launch_to_run_start, cost.run_start_to_first_step) == pytest.approx((0.5, 0.5))
    assert measure.recomputed_seconds(events, compute_metrics(events)) == pytest.approx(0.1)  # step 5 → step 6


def test_every_benchmark_point_is_a_valid_scenario():
    from benchmarks import points

    for data in (points.hang("heartbeat", 2, 0.5), points.hang("section", 4, 1, world=4), points.kill("torchrun", 2, True),
                 points.exception(inprocess=True), points.exception(inprocess=False), points.steady("armed")):
        parse_scenario(data, data["name"])


def test_markdown_table_shows_missing_values_as_dashes():
    table = markdown_table([{"a": 1.23456, "b": None}, {"a": 250.4, "c": "x"}])
    assert table.splitlines() == ["| a | b | c |", "|---|---|---|", "| 1.23 | - | - |", "| 250 | - | x |"]


def test_importtime_lines_give_each_packages_cumulative_seconds() -> None:
    from benchmarks.startup import parse_importtime

    stderr = "\n".join([
        "import time: self [us] | cumulative | imported package",
        "import time:      5219 |      29153 |   trainer.config_loader",
        "import time:     54285 |    1971204 |     torch",
        "/x/torch/cuda/__init__.py:64: FutureWarning: The pynvml package is deprecated.",
        "import time:       641 |    1031879 |     torch.distributed.checkpoint",
        "import time:        66 |        100 |   torch.distributed",
        "import time:      4088 |    3054950 | trainer.session",
        "import time:     10900 |    1072260 |   torch._dynamo.convert_frame",
        "import time:       900 |    2500000 |   torch._dynamo.later_and_bigger_than_torch",
    ])
    assert parse_importtime(stderr) == {
        "torch": 1.971, "torch.distributed.checkpoint": 1.032, "torch._dynamo": 2.5, "trainer.session": 3.055,
    }


def test_the_main_jobs_floor_is_its_newest_runs_launcher_span(tmp_path) -> None:
    import json
    import os

    from benchmarks.jobs import launcher_span

    assert launcher_span(tmp_path) is None  # no run yet
    for name, (launch, end), mtime in (("rank_killed-old", (10.0, 40.0), 1000), ("rank_killed-new", (100.0, 117.5), 2000)):
        events = tmp_path / "chaos-runs" / name / "events"
        events.mkdir(parents=True)
        lines = [ev("launch", launch, rank=-1), ev("run_start", launch + 5), ev("launcher_exit", end, rank=-1, code=0)]
        (events / "launcher.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
        os.utime(events.parent, (mtime, mtime))
    assert launcher_span(tmp_path) == pytest.approx(17.5)


def test_before_must_be_a_checkout_of_this_project(tmp_path, capsys) -> None:
    from benchmarks.__main__ import parse_args

    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--before", str(tmp_path)])
    assert exit_info.value.code == 2
    assert f"--before: {tmp_path} is not a checkout of this project" in capsys.readouterr().err


def test_time_split_parts_sum_to_the_runs_wall_time():
    """Launch 100.0 → run_start 100.5 → steps from 101.0; restart line 102.1 → run_start 103.0 → the resumed
    step from 103.4; launcher exit 105.5."""
    split = measure.time_split(rank_killed_story())
    assert split is not None
    assert (split.wall, split.attempts) == (pytest.approx(5.5), 2)
    assert split.startup == pytest.approx(0.5 + 0.9)
    assert split.build == pytest.approx(0.4 + 0.4)  # run_start → the first step's start, in each attempt
    assert split.steps == pytest.approx(0.7)  # seven rank-0 steps of 0.1 s
    assert split.startup + split.build + split.steps + split.waits == pytest.approx(split.wall)
    assert measure.time_split([ev("step", 1.0, iteration=1, loss=1.0, step_time=0.1)]) is None, "never launched"


def test_the_catalogue_split_reads_run_folders_and_baselines(tmp_path, capsys):
    """Real event files in a runs folder and a baseline cache, read by the command a user runs."""
    import json

    from benchmarks import catalogue

    for folder in (tmp_path / "runs" / "rank_killed-20261202-030000-abcdef", tmp_path / "cache" / "0123abcd"):
        (folder / "events").mkdir(parents=True)
        lines = [json.dumps(e) for e in rank_killed_story()]
        (folder / "events" / "all.jsonl").write_text("\n".join(lines) + "\n")
    times = catalogue.run_times([tmp_path / "runs"], [tmp_path / "cache"])
    assert sorted((t.name, t.baseline) for t in times) == [("0123abcd", True), ("rank_killed", False)]
    scenarios, baselines = catalogue.totals(times)
    assert (scenarios["count"], scenarios["attempts"], baselines["count"]) == (1, 2, 1)
    assert scenarios["wall_s"] == pytest.approx(5.5)
    assert catalogue.main([str(tmp_path / "runs"), "--baselines", str(tmp_path / "cache"), "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "| baselines | 1 | 2 | 5.5 |" in out and "| rank_killed | 2 | 5.5 |" in out
    with pytest.raises(SystemExit) as bad:
        catalogue.main([str(tmp_path / "nowhere")])
    assert bad.value.code == 2 and "not a folder" in capsys.readouterr().err


def test_functional_tests_are_each_test_function_and_each_scenario(tmp_path) -> None:
    """The suite's same-tests row deselects what a checkout has beyond an earlier one's tests: a new test
    function (all its cases) and a new scenario file, named as pytest's --deselect takes them."""
    from benchmarks.jobs import functional_tests

    def checkout(root, files: dict[str, str], scenarios: list[str]):
        (root / "tests" / "functional").mkdir(parents=True)
        (root / "scenarios").mkdir()
        for name, text in files.items():
            (root / "tests" / "functional" / name).write_text(text)
        for name in scenarios:
            (root / "scenarios" / f"{name}.yaml").write_text("name: x\n")
        return functional_tests(root)

    scenarios_py = "def test_scenario(scenario_file, run_scenario):\n    pass\n"
    before = checkout(tmp_path / "a", {"test_scenarios.py": scenarios_py, "test_cli.py": "def test_a():\n    pass\n"}, ["rank_killed"])
    now = checkout(
        tmp_path / "b",
        {"test_scenarios.py": scenarios_py, "test_cli.py": "def test_a():\n    pass\n\n\ndef test_b(x):\n    pass\n",
         "helpers.py": "def test_not_collected():\n    pass\n"},
        ["rank_killed", "rank_hung"],
    )
    assert before == {"tests/functional/test_cli.py::test_a", "tests/functional/test_scenarios.py::test_scenario[rank_killed]"}
    assert now - before == {"tests/functional/test_cli.py::test_b", "tests/functional/test_scenarios.py::test_scenario[rank_hung]"}
