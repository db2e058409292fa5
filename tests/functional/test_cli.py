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
