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
import torch

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
        # What torch and numpy refuse once training starts, refused with the config (each was a traceback):
        ("optimizer.lr=-1", "optimizer.lr"),
        ("optimizer.adam_beta1=1.5", "optimizer.adam_beta1"),
        ("optimizer.weight_decay=-0.1", "optimizer.weight_decay"),
        ("model.vocab_size=100", "model.vocab_size"),
        ("model.hidden_dropout=1.5", "model.hidden_dropout"),
        ("model.init_method_std=-1", "model.init_method_std"),
        ("rng.seed=-1", "rng.seed"),
        ("dataset.seed=99999999999", "dataset.seed"),
        ("dist.distributed_backend=nccl", "dist.distributed_backend"),
        ("dist.distributed_timeout_minutes=0", "dist.distributed_timeout_minutes"),
        ("train.exit_signal=SIGFOO", "train.exit_signal"),
        ("train.exit_interval=-2", "train.exit_interval"),
        ("checkpoint.most_recent_k=0", "checkpoint.most_recent_k"),
    ],
    ids=[
        "unknown-key", "unknown-section", "not-an-int", "out-of-range", "not-a-bool", "missing-equals", "missing-key",
        "negative-lr", "beta-past-1", "negative-weight-decay", "vocab-below-bytes", "dropout-past-1", "negative-init-std",
        "negative-seed", "seed-past-32-bits", "nccl-on-cpu", "zero-timeout", "unknown-signal", "negative-exit-interval",
        "keep-zero-checkpoints",
    ],
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


def test_every_bad_override_is_reported_at_once(tmp_path):
    proc = trainer_cli("--recipe", "tiny_cpu", "optimizer.lr=-1", "train.no_such_key=3", "model.vocab_size=10", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert [line.split(": ")[2].split(" ")[0] for line in lines] == ["unknown", "model.vocab_size", "optimizer.lr"], lines


@pytest.mark.parametrize(
    ("content", "named"),
    [(bytes(range(256)), "not a text file"), (b"train: [1,\n", "not valid YAML"), (b"train:\n  train_iters: [3]\n", "train.train_iters")],
    ids=["binary", "garbled", "a list for an int"],
)
def test_a_bad_config_file_is_one_line(tmp_path, content, named):
    config = tmp_path / "cfg.yaml"
    config.write_bytes(content)
    proc = trainer_cli("--recipe", "tiny_cpu", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("trainer: error: ") and named in proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_on_a_machine_without_it_is_one_line(tmp_path):
    proc = trainer_cli("--recipe", "tiny_cpu", "dist.device=cuda", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr == "trainer: error: dist.device=cuda: CUDA is not available on this machine\n"


def _error_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return [line for line in proc.stderr.splitlines() if line.startswith("trainer: error: ")]


def test_a_checkpoint_to_load_that_cannot_be_is_one_line(tmp_path):
    """checkpoint.load at nothing, at a checkpoint whose every candidate is corrupt, at another model's."""
    ckpt = tmp_path / "ckpt"
    made = trainer_cli("--recipe", "tiny_cpu", "train.train_iters=3", f"checkpoint.save={ckpt}", "checkpoint.save_interval=2", cwd=tmp_path)
    assert made.returncode == 0, made.stderr[-3000:]
    other = trainer_cli("--recipe", "tiny_cpu", "train.train_iters=4", "model.hidden_size=64", f"checkpoint.load={ckpt}", cwd=tmp_path)
    assert other.returncode == 2
    assert _error_lines(other) == [
        f"trainer: error: {ckpt / 'iter_0000002'}: model.wte.weight is of shape [256, 32] there, [256, 64] in this "
        "model (a checkpoint of another model?)"
    ]
    data = next((ckpt / "iter_0000002").glob("*.distcp"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    corrupt = trainer_cli("--recipe", "tiny_cpu", "train.train_iters=4", f"checkpoint.load={ckpt}", cwd=tmp_path)
    assert corrupt.returncode == 2
    assert _error_lines(corrupt) == [f"trainer: error: checkpoint.load={ckpt}: no loadable checkpoint there"]
    missing = trainer_cli("--recipe", "tiny_cpu", "train.train_iters=4", f"checkpoint.load={tmp_path / 'none'}", cwd=tmp_path)
    assert missing.returncode == 2 and _error_lines(missing) == [f"trainer: error: checkpoint.load={tmp_path / 'none'}: no loadable checkpoint there"]


@pytest.mark.parametrize("keep", ["thread", "child", "nothing"])
def test_the_fast_exit_keeps_the_code_the_output_and_what_is_still_running(tmp_path, keep):
    """exit_process skips the interpreter's teardown only when nothing waits on it: a live non-daemon thread
    or a child process is let finish (its file is written), and the code and the unflushed output stay."""
    script = f"""
import multiprocessing, pathlib, sys, threading, time
from trainer.cli import exit_process
def write():
    time.sleep(0.5)
    pathlib.Path({str(tmp_path / "done")!r}).write_text("ok")
if {keep!r} == "thread":
    threading.Thread(target=write).start()
elif {keep!r} == "child":
    multiprocessing.get_context("fork").Process(target=write).start()
print("unflushed", end="")
sys.stderr.write("err")
exit_process(3)
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "unflushed", "err")
    assert (tmp_path / "done").is_file() is (keep != "nothing")


def test_the_fast_exit_shuts_torch_compile_workers_down_first(tmp_path):
    """torch.compile's worker sidecar (a subprocess, not a multiprocessing child: TE's jit fuser starts it) is
    shut down by torch's atexit hook, which os._exit skips: exit_process runs it, so the sidecar is gone once
    the rank is (a fault-free TE run on an H100 left it behind the launcher)."""
    script = """
from torch._inductor import async_compile
from trainer.cli import exit_process
async_compile.AsyncCompile.process_pool()
print(next(iter(async_compile._pool_set)).process.pid, flush=True)
exit_process(0)
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    sidecar = int(proc.stdout.split()[-1])
    assert not Path(f"/proc/{sidecar}").exists(), Path(f"/proc/{sidecar}/cmdline").read_bytes()
