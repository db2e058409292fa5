"""GPU-only checks: NCCL/CUDA paths of the trainer. Skipped on CPU machines, with the reason."""

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainer.config_base import ConfigError
from trainer.config_loader import load_config
from trainer.model import GPT

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run with nox -s gpu)"),
]


def _batch(cfg, device):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, cfg.model.vocab_size, (2, cfg.model.seq_length), generator=g)
    return x.to(device), x.roll(-1, dims=1).to(device)


def test_deterministic_mode_repeats_a_cuda_step_bit_for_bit() -> None:
    from trainer.loop import use_deterministic_kernels

    use_deterministic_kernels()
    cfg = load_config("tiny_cpu", None, ["dist.device=cuda"])
    losses = []
    for _ in range(2):
        torch.manual_seed(0)
        model = GPT(cfg.model).cuda()
        x, y = _batch(cfg, "cuda")
        loss = model(x, y)
        loss.backward()
        grad = next(model.parameters()).grad.clone()
        losses.append((loss.item(), grad))
    assert losses[0][0] == losses[1][0]
    assert torch.equal(losses[0][1], losses[1][1])


TE_INSTALLED = importlib.util.find_spec("transformer_engine") is not None
"""Installed, not importable: an installed TE that fails to import fails the layers test with its error rather
than skipping it."""

TE_STEP = """
import torch
from trainer.config_loader import load_config
from trainer.model import GPT
cfg = load_config("tiny_cpu", None, ["dist.device=cuda", "model.impl=te"])
model = GPT(cfg.model).cuda()
x = torch.randint(0, cfg.model.vocab_size, (2, cfg.model.seq_length), device="cuda")
loss = model(x, x.roll(-1, dims=1))
loss.backward()
print(type(model.blocks[0]).__module__, loss.item())
"""


@pytest.mark.skipif(not TE_INSTALLED, reason="Transformer Engine is not installed here; model.impl=te needs it")
def test_transformer_engine_layers_train_where_installed() -> None:
    """A step of model.impl=te in a process of its own, as a rank runs it: TE imported before any cuDNN kernel
    ran. In a process that had already run cuDNN kernels (this test in pytest's worker, after the test above),
    importing TE loaded the system's libcudnn_heuristic beside torch's cuDNN and failed ("undefined symbol",
    1x H100, 2026-12-06): a pitfall of the machine's two cuDNNs, which no rank meets."""
    proc = subprocess.run([sys.executable, "-c", TE_STEP], cwd=REPO, env={**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), os.environ.get("PYTHONPATH", "")])}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    module, loss = proc.stdout.split()[-2:]
    assert module.startswith("transformer_engine.") and math.isfinite(float(loss)), proc.stdout


@pytest.mark.skipif(TE_INSTALLED, reason="Transformer Engine is installed here")
def test_model_impl_te_without_transformer_engine_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="Transformer Engine"):
        GPT(load_config("tiny_cpu", None, ["model.impl=te"]).model)
