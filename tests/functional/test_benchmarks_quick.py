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
