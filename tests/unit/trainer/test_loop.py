"""AdamW's kernel choice (trainer/loop.py adam_fused): fused on GPU, the per-tensor loop on CPU as before."""

from __future__ import annotations

import pytest
import torch

from trainer.config import OptimizerConfig
from trainer.loop import adam_fused


def test_adam_is_fused_on_gpu() -> None:
    assert adam_fused(OptimizerConfig(), torch.device("cuda"))


@pytest.mark.parametrize(
    ("impl", "device"), [("auto", "cpu"), ("for_loop", "cpu"), ("for_loop", "cuda")],
)
def test_adam_keeps_the_per_tensor_loop_on_cpu_or_when_asked(impl: str, device: str) -> None:
    assert not adam_fused(OptimizerConfig(adam_impl=impl), torch.device(device))

