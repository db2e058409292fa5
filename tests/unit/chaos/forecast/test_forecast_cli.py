"""`chaos forecast` as a user runs it, on the shipped profile: the report, its JSON, and bad input as one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
SHIPPED = ROOT / "chaos" / "forecast" / "profiles" / "megatron.yaml"


def chaos(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chaos", *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_the_shipped_profile_forecasts_llama3_as_json_markdown_and_png(tmp_path: Path) -> None:
    md, png = tmp_path / "f.md", tmp_path / "f.png"
    result = chaos("forecast", str(SHIPPED), "--failures", "llama3-16k", "--gpus", "16384", "--days", "54",
                   "--replicas", "100", "--json", "--markdown", str(md), "--png", str(png), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    g = out["goodput"]
    assert 0 < g["p10"] <= g["mean"] <= g["p90"] < 1
    assert set(out["badput"]) >= {"WASTED_PROGRESS_FROM_DISRUPTION", "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION",
                                  "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME", "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME", "PROGRAM_STARTUP"}
    assert g["mean"] + sum(out["badput"].values()) == pytest.approx(1, abs=1e-6)
    best = out["best_save_interval"]
    assert best["steps"] in [p["steps"] for p in out["interval_curve"]] and best["young_daly_steps"] > 0
    assert [r["name"] for r in out["what_if"]][:2] == ["as measured", "async_save"]
    assert "| goodput |" in md.read_text() and png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(("args", "message"), [
    (("--failures", "llama4"), "error: --failures: unknown preset 'llama4'; known: llama3-16k"),
    (("--mtbf-gpu-hours", "-5"), "error: --mtbf-gpu-hours: must be a positive number of hours, got -5"),
    (("--mtbf-gpu-hours", "1000", "--save-interval", "0"), "error: --save-interval: must be >= 1 step, got 0"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    result = chaos("forecast", str(SHIPPED), "--gpus", "64", "--days", "1", *args, cwd=tmp_path)
    assert (result.returncode, result.stderr.strip(), result.stdout) == (2, message, "")


def test_a_profile_lacking_a_class_the_preset_needs_names_the_class_and_its_scenario(tmp_path: Path) -> None:
    text = SHIPPED.read_text()
    partial = tmp_path / "partial.yaml"
    partial.write_text(text[: text.index("  hang:")] + text[text.index("settings:"):])
    result = chaos("forecast", str(partial), "--gpus", "64", "--days", "1", "--failures", "llama3-16k", cwd=tmp_path)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "'hang' (measured by scenarios/rank_hung.yaml)" in line and "'storage'" in line


def test_a_folder_that_is_not_judged_is_refused(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    result = chaos("forecast", "profile", str(tmp_path / "run"), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {tmp_path / 'run'}: not a judged run folder (no journal.json): judge it first with chaos judge {tmp_path / 'run'}"
