"""A small GPT in plain torch (nanoGPT's shape), with Transformer Engine layers when asked for.

Decoder-only, causal self-attention, pre-LayerNorm, GeLU MLP, learned positions, tied embeddings.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from trainer.config import ModelConfig
from trainer.config_base import ConfigError

ALL_SDPA = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH]
DETERMINISTIC_CUDA_SDPA = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
"""The fused kernels whose backward PyTorch makes deterministic under strict ``use_deterministic_algorithms(True)``
(attention_backward.cu): flash passes ``deterministic`` to FlashAttention-2's backward (per-split dQ accumulators
instead of atomics), memory-efficient forces ``num_splits_key = 1``. cuDNN attention is left out: PyTorch refuses it
in strict mode (sdp_utils.cpp, check_cudnn_deterministic). Math stays as the fallback for shapes they refuse."""


def attention_backends(cfg: ModelConfig, device: torch.device) -> list[SDPBackend]:
    """The SDPA backends a forward on `device` may use; torch picks the fastest of them that fits the shapes.

    Deterministic mode takes the fused kernels only where their backward is deterministic: on CUDA, with torch's
    deterministic algorithms on and strict (``warn_only`` keeps flash on its atomics). Elsewhere, math, as before
    (the CPU path is unchanged bit for bit).
    """
    if cfg.attention_backend == "math":
        return [SDPBackend.MATH]
    if not cfg.deterministic_mode:
        return ALL_SDPA
    strict = torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled()
    return DETERMINISTIC_CUDA_SDPA if device.type == "cuda" and strict else [SDPBackend.MATH]


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head = cfg.num_attention_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout = cfg.attention_dropout
        self.cfg = cfg

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        with sdpa_kernel(attention_backends(self.cfg, x.device)):
            y = F.scaled_dot_product_attention(
                q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
            )
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.hidden_size, cfg.ffn_hidden_size)
        self.proj = nn.Linear(cfg.ffn_hidden_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.hidden_size)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.hidden_size)
        self.mlp = MLP(cfg)
        self.drop = nn.Dropout(cfg.hidden_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.drop(self.mlp(self.ln2(x)))


def _te_block(cfg: ModelConfig) -> nn.Module:
    """One Transformer Engine layer. A broken TE raises ImportError, RuntimeError, or OSError (its shared
    libraries beside a different cuDNN or CUDA)."""
    try:
        import transformer_engine.pytorch as te
    except (ImportError, RuntimeError, OSError) as e:
        raise ConfigError(f"model.impl=te: Transformer Engine is not usable here ({e}); use model.impl=torch") from None
    return te.TransformerLayer(
        cfg.hidden_size,
        cfg.ffn_hidden_size,
        cfg.num_attention_heads,
        hidden_dropout=cfg.hidden_dropout,
        attention_dropout=cfg.attention_dropout,
        self_attn_mask_type="causal",
        layer_type="encoder",
        activation="gelu",
        attn_input_format="bshd",
    )


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.wpe = nn.Embedding(cfg.seq_length, cfg.hidden_size)
        make = _te_block if cfg.impl == "te" else Block
        self.blocks = nn.ModuleList(make(cfg) for _ in range(cfg.num_layers))
        self.ln_f = nn.LayerNorm(cfg.hidden_size)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):  # GPT-2's scaled init of residual projections
                nn.init.normal_(p, 0.0, cfg.init_method_std / math.sqrt(2 * cfg.num_layers))

    def _init(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, 0.0, self.cfg.init_method_std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy of a batch."""
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))
