"""The GPT: a finite loss that training lowers, seeded init, and a clear error where TE is missing."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch
from torch.nn.attention import SDPBackend

from trainer.config import ModelConfig
from trainer.config_base import ConfigError
from trainer.model import GPT, attention_backends

TINY = {"num_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "seq_length": 16}


def model(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    return GPT(ModelConfig(**{**TINY, **overrides}))


def batch(seed: int = 1, rows: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, 256, (rows, TINY["seq_length"] + 1), generator=torch.Generator().manual_seed(seed))
    return tokens[:, :-1], tokens[:, 1:]


def test_forward_gives_a_finite_scalar_loss_near_uniform_at_init():
    loss = model()(*batch())
    assert loss.shape == ()
    assert torch.isfinite(loss)
    assert loss.item() == pytest.approx(math.log(256), rel=0.05), "small init: close to a uniform guess"


def test_loss_falls_over_a_few_steps_on_a_fixed_batch():
    m = model()
    x, y = batch()
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        loss = m(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0] - 0.3, losses


def test_init_is_deterministic_for_a_seed_and_embeddings_are_tied():
    a, b, c = model(seed=5), model(seed=5), model(seed=6)
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert not torch.equal(a.wte.weight, c.wte.weight)
    assert a.lm_head.weight is a.wte.weight


def test_positions_beyond_seq_length_are_rejected():
    tokens = torch.zeros((1, TINY["seq_length"] + 1), dtype=torch.int64)
    with pytest.raises(IndexError):
        model()(tokens, tokens)


@pytest.mark.skipif(importlib.util.find_spec("transformer_engine") is not None, reason="Transformer Engine is installed here")
def test_te_impl_without_transformer_engine_is_a_config_error():
    with pytest.raises(ConfigError) as err:
        model(impl="te")
    message = str(err.value)
    assert message.startswith("model.impl=te")
    assert "Transformer Engine is not usable here" in message
    assert "use model.impl=torch" in message
    assert "\n" not in message


def test_te_whose_libraries_do_not_load_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """TE installed beside another cuDNN: its import raises OSError (a shared library that does not load)."""
    import builtins

    real_import = builtins.__import__

    def broken_te(name: str, *args, **kwargs):
        if name.startswith("transformer_engine"):
            raise OSError("libcudnn_graph.so.9: cannot open shared object file: No such file or directory")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", broken_te)
    with pytest.raises(ConfigError, match=r"^model.impl=te: Transformer Engine is not usable here \(libcudnn_graph"):
        model(impl="te")


# Which attention kernels a forward may use (trainer/model.py attention_backends).

CUDA, CPU = torch.device("cuda"), torch.device("cpu")


@pytest.fixture
def strict_determinism():
    """torch's deterministic algorithms on (strict) for the test, then back as they were."""
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def test_deterministic_cuda_attention_is_fused_under_strict_determinism(strict_determinism) -> None:
    backends = attention_backends(ModelConfig(**TINY), CUDA)
    assert backends == [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    assert SDPBackend.CUDNN_ATTENTION not in backends, "PyTorch refuses cuDNN attention in strict mode"


def test_deterministic_attention_falls_back_to_math_without_strict_determinism() -> None:
    cfg = ModelConfig(**TINY)
    assert attention_backends(cfg, CUDA) == [SDPBackend.MATH], "determinism off: flash's backward uses atomics"
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        assert attention_backends(cfg, CUDA) == [SDPBackend.MATH], "warn_only keeps flash on its atomics"
    finally:
        torch.use_deterministic_algorithms(False)


def test_cpu_attention_stays_math_in_deterministic_mode(strict_determinism) -> None:
    assert attention_backends(ModelConfig(**TINY), CPU) == [SDPBackend.MATH]


def test_nondeterministic_attention_may_use_every_backend() -> None:
    backends = attention_backends(ModelConfig(**TINY, deterministic_mode=False), CUDA)
    assert set(backends) == {SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                             SDPBackend.MATH}


@pytest.mark.parametrize("deterministic", [True, False])
def test_attention_backend_math_forces_math(strict_determinism, deterministic: bool) -> None:
    cfg = ModelConfig(**TINY, deterministic_mode=deterministic, attention_backend="math")
    assert attention_backends(cfg, CUDA) == [SDPBackend.MATH]
