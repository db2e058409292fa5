"""The GPU step benchmark's arithmetic (FLOPs, MFU, the bit-for-bit comparison) and its plumbing on CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.gpu_step import SMOKE_SHAPES, flops_per_token, mfu, same_run, unmeasured

ROOT = Path(__file__).resolve().parents[3]
L, H, FFN, V, S = 20, 2048, 8192, 256, 2048
"""The 1B shape of the GPU step benchmark (docs/performance.md, "GPU step"): 1,011,888,128 parameters."""


def test_flops_per_token_of_the_1b_shape_by_hand() -> None:
    dense, attention = flops_per_token(L, H, FFN, V, S)
    matmul_weights = L * (3 * H * H + H * H + H * FFN + FFN * H) + H * V  # qkv, proj, fc, proj; the LM head
    assert matmul_weights == 1_007_157_248
    assert dense == 6 * matmul_weights
    assert attention == 12 * L * H * S == 1_006_632_960


def test_mfu_of_6n_reproduces_the_recorded_1b_figure() -> None:
    """The figure measured before (docs/performance.md, "GPU step"): 1.01B parameters, mbs 8 x seq 2048 in 246 ms
    is 40.8% of 989 TFLOP/s, counted as 6N."""
    tokens_per_s = 8 * 2048 / 0.246
    assert mfu(6 * 1_011_888_128, tokens_per_s) == pytest.approx(0.408, abs=0.002)


def run(losses: list[float], weights: list[torch.Tensor]) -> dict:
    return {"losses": losses, "weights": weights}


def test_same_run_needs_every_loss_and_every_weight_bit_for_bit() -> None:
    w = [torch.ones(3), torch.zeros(2)]
    assert same_run(run([1.0, 0.5], w), run([1.0, 0.5], [t.clone() for t in w]))
    assert not same_run(run([1.0, 0.5], w), run([1.0, 0.5000001], w))
    nudged = [w[0], torch.tensor([0.0, torch.finfo(torch.float32).tiny])]
    assert not same_run(run([1.0], w), run([1.0], nudged))
    assert not same_run(run([1.0], w), run([1.0], w[:1]))


def test_the_smoke_run_measures_every_mode_and_checks_determinism(tmp_path: Path) -> None:
    """`python -m benchmarks.gpu_step --smoke`: the real Trainer on CPU, every mode, the JSON and the table."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.gpu_step", "--smoke", "--out", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    results = json.loads((tmp_path / "gpu_step.json").read_text())
    assert [r["mode"] for r in results["steps"]] == ["nondet", "det", "det-old"]
    assert all(r["step_ms"] > 0 and r["tokens_per_s"] > 0 for r in results["steps"])
    assert [r["attention"] for r in results["steps"]] == ["FLASH_ATTENTION", "MATH", "MATH"], "CPU: math when deterministic"
    assert results["determinism"][0]["bit_identical"] is True
    assert {r["backend"] for r in results["attention"]} == {"CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH"}
    assert "| det-old |" in (tmp_path / "gpu_step.md").read_text()


def test_a_row_out_of_memory_is_skipped_and_any_other_error_fails_it_with_the_reason() -> None:
    shape = SMOKE_SHAPES[0]
    oom = unmeasured(shape, "det-old", torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB"))
    assert oom["outcome"] == "skipped" and oom["reason"].startswith("does not fit")
    assert "Tried to allocate 8.00 GiB" in oom["reason"]
    other = unmeasured(shape, "det", ValueError("bad\nsecond line"))
    assert other == {"shape": "smoke", "mode": "det", "outcome": "failed", "reason": "ValueError: bad"}


def test_rows_that_fail_never_end_the_benchmark(tmp_path: Path) -> None:
    """Every row of the smoke run fails (a config value the trainer refuses): each is listed with its reason,
    determinism is not measured, the attention section still runs, the files are written, and it exits 1."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.gpu_step", "--smoke", "--out", str(tmp_path),
                          "--override", "optimizer.adam_impl=bogus"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr[-2000:]
    results = json.loads((tmp_path / "gpu_step.json").read_text())
    assert [(r["mode"], r["outcome"]) for r in results["steps"]] == [("nondet", "failed"), ("det", "failed"), ("det-old", "failed")]
    assert all("adam_impl" in r["reason"] for r in results["steps"]), results["steps"]
    assert results["determinism"] == [{"shape": "smoke", "bit_identical": None, "det_vs_nondet": None, "det_old_vs_nondet": None}]
    assert len(results["attention"]) == 8
    assert "| failed |" in (tmp_path / "gpu_step.md").read_text()
