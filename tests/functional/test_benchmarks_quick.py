"""`python -m benchmarks --quick` end to end: real runs, so it lives with the functional tests.

It checks the shape of what the benchmark writes, never its timings (those are measurements, not limits).
"""

import json
import subprocess
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def test_quick_benchmark_writes_table_json_and_picture(tmp_path):
    subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--out", str(tmp_path)], cwd=PROJECT_ROOT, check=True, timeout=600)
    results = json.loads((tmp_path / "results.json").read_text())
    assert {"detection", "recovery", "lost_work", "overhead", "scale"} <= results["sections"].keys()
    for name in ("detection", "recovery", "lost_work", "scale"):
        assert results["sections"][name], name
    assert results["machine"]["cpus"] >= 1
    text = (tmp_path / "results.md").read_text()
    assert "## 1. Detection" in text and "| mode | timeout_s |" in text
    assert (tmp_path / "results.png").stat().st_size > 0


def test_a_before_checkout_whose_worker_fails_is_one_line_and_exit_1(tmp_path):
    """The start-up section runs the trainer of ``--before`` beside this one; when that process fails, the
    benchmark says which in one line (no traceback) and exits 1; results are written per finished section,
    so none is written here, and nothing half-written."""
    before = tmp_path / "before"
    (before / "trainer").mkdir(parents=True)
    (before / "trainer" / "__init__.py").write_text("")
    (before / "trainer" / "__main__.py").write_text("import sys\nprint('no such recipe here', file=sys.stderr)\nsys.exit(3)\n")
    (before / "noxfile.py").write_text("")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--sections", "startup", "--before", str(before), "--out", str(out)],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    error = [line for line in proc.stderr.splitlines() if line.startswith("bench: error:")]
    assert error == [line for line in proc.stderr.splitlines() if "Traceback" in line or line.startswith("bench: error:")]
    assert "benchmark worker exited 3" in error[0] and "no such recipe here" in error[0]
    assert not (out / "results.json").exists()
