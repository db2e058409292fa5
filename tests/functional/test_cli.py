"""The chaos CLI as a user runs it: a wrong expectation fails with both values; bad files launch nothing."""

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def chaos(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "chaos", *args], cwd=cwd, capture_output=True, text=True, timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "CHAOS_CACHE_DIR": str(ROOT / ".chaos-cache")},
    )


def test_a_wrong_expectation_fails_showing_expected_and_observed(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "scenarios" / "rank_killed.yaml").read_text())
    data["expect"]["resumed_from_step"] = 10  # a checkpoint step, but not the one the run resumes from
    (tmp_path / "rank_killed.yaml").write_text(yaml.safe_dump(data))
    result = chaos("run", str(tmp_path / "rank_killed.yaml"), "--out", str(tmp_path / "runs"), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAIL resumed_from_step: expected == 10, observed 5" in result.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    journal = json.loads((run_dir / "journal.json").read_text())
    assert journal["status"] == "failed"
    assert str(run_dir) in result.stdout


def test_a_malformed_scenario_launches_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: broken\ndescription: x\nworld_size: 2\nfaults:\n  - {type: rank_killed, rank: 5, at_step: 3}\n")
    for args in (("validate", str(bad)), ("run", str(bad), "--out", str(tmp_path / "runs"))):
        result = chaos(*args, cwd=tmp_path)
        assert result.returncode == 2
        assert result.stderr.strip() == f"error: {bad}: faults[0].rank: 5 is outside the world (world_size 2)"
    assert not (tmp_path / "runs").exists()


def test_every_problem_of_a_bad_file_is_one_line_at_once(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "scenarios" / "rank_killed.yaml").read_text())
    data["name"] = "three_broken"
    data["seed"] = "x"  # a field's type
    data["expect"]["restart"] = 1  # an unknown key
    data["faults"][0]["at_step"] = 99  # a cross-field rule: past train.train_iters (12)
    bad = tmp_path / "three_broken.yaml"
    bad.write_text(yaml.safe_dump(data))
    result = chaos("validate", str(bad), str(ROOT / "scenarios" / "rank_killed.yaml"), cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 3, result.stderr
    assert lines[0] == f"error: {bad}: seed: must be an integer, got 'x'"
    assert lines[1].startswith(f"error: {bad}: expect.restart: unknown key; known: exit_code, restarts,")
    assert lines[2] == f"error: {bad}: faults[0].at_step: 99 is past train.train_iters (12)"
    assert result.stdout == f"ok: {ROOT / 'scenarios' / 'rank_killed.yaml'}\n"


def test_a_file_past_the_value_limit_says_whether_its_aliases_or_its_size_did_it(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"  # 10**5 values from nine lines: a list of ten, nested by alias five deep
    bomb.write_text("a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"{b}: &{b} [{', '.join([f'*{a}'] * 10)}]\n" for a, b in zip("abcd", "bcde", strict=True)
    ))
    big = tmp_path / "big.yaml"  # 1 MB written out, no alias at all
    big.write_text("name: big\nvalues: [" + ", ".join(["0"] * 330_000) + "]\n")
    assert 0.9e6 < big.stat().st_size < 1 << 20  # under the byte limit: the value limit is what refuses it
    result = chaos("validate", str(bomb), str(big), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: {bomb}: its aliases expand it past 100000 values, the most a YAML file read here may hold",
        f"error: {big}: it holds more than 100000 values, the most a YAML file read here may hold",
    ]
