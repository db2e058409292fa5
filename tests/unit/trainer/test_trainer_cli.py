"""`python -m trainer` as a user runs it: a bad override is one line on stderr, exit 2, nothing written.

These are real subprocesses. A config error exits before torch is imported, so those cost a fraction of
a second; the one real training run pays the full start-up (~5 s) once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def trainer_cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    launched = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT", "MASTER_ADDR", "TORCHELASTIC_", "FT_", "CHAOS_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(launched)}  # a plain, single process
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "trainer", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("train.no_such_key=3", "train.no_such_key"),
        ("nosection.train_iters=3", "nosection"),
        ("train.train_iters=abc", "train.train_iters"),
        ("train.train_iters=0", "train.train_iters"),
        ("checkpoint.async_save=maybe", "checkpoint.async_save"),
        ("train.train_iters", "train.train_iters"),
        ("=3", "=3"),
    ],
    ids=["unknown-key", "unknown-section", "not-an-int", "out-of-range", "not-a-bool", "missing-equals", "missing-key"],
)
def test_bad_override_exits_2_with_one_line_and_writes_nothing(tmp_path, override, named):
    run_dir, ckpt = tmp_path / "run", tmp_path / "ckpt"
    proc = trainer_cli(
        "--recipe", "tiny_cpu", f"logger.run_dir={run_dir}", f"checkpoint.save={ckpt}", "checkpoint.save_interval=1",
        override, cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("trainer: error: ")
    assert named in lines[0]
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == [], "nothing is written: no run_dir, no checkpoint folder, no stray file"


def test_tiny_cpu_run_exits_0(tmp_path):
    proc = trainer_cli("--recipe", "tiny_cpu", "train.train_iters=3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = [line for line in proc.stdout.splitlines() if line.startswith("iteration ")]
    assert [line.split(" | ")[0] for line in steps] == ["iteration 1/3", "iteration 2/3", "iteration 3/3"]
    assert list(tmp_path.iterdir()) == [], "without run_dir or checkpoint.save the run writes nothing"
