"""`chaos forecast` on a real judged run folder, as a user runs it: profile, then forecast, as subprocesses."""

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


def test_a_profile_of_a_judged_run_forecasts_and_names_what_it_lacks(tmp_path: Path) -> None:
    run = chaos("run", "rank_killed", "--out", str(tmp_path / "runs"), cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    journal = json.loads((run_dir / "journal.json").read_text())

    built = chaos("forecast", "profile", str(run_dir), "-o", str(tmp_path / "p.yaml"), cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    profile = yaml.safe_load((tmp_path / "p.yaml").read_text())
    crash = profile["classes"]["process_death"]
    assert crash["detect_s"] == journal["metrics"]["time_to_detect_s"]  # the judge's metric, not another
    assert crash["restart_s"] > 0 and crash["lost_steps"] == journal["metrics"]["lost_steps"]
    assert profile["save"]["interval_steps"] == 5 and set(profile["classes"]) == {"process_death"}

    forecast = chaos("forecast", str(tmp_path / "p.yaml"), "--gpus", "1024", "--days", "7", "--mtbf-gpu-hours", "50000",
                     "--replicas", "200", "--json", cwd=tmp_path)
    assert forecast.returncode == 0, forecast.stderr
    out = json.loads(forecast.stdout)
    assert 0 < out["goodput"]["p10"] <= out["goodput"]["mean"] <= out["goodput"]["p90"] < 1
    assert out["failures_mean"] > 0 and out["best_save_interval"]["steps"] >= 1

    lacking = chaos("forecast", str(tmp_path / "p.yaml"), "--gpus", "1024", "--days", "7", "--failures", "llama3-16k", cwd=tmp_path)
    assert lacking.returncode == 2
    (line,) = lacking.stderr.strip().splitlines()
    assert "'hang' (measured by scenarios/rank_hung.yaml)" in line and "Traceback" not in lacking.stderr
