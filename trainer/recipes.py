"""Named recipes, in the manner of Megatron Bridge's run_recipe.py: flat dotted overrides of the defaults."""

from __future__ import annotations

from typing import Any

from trainer.config_base import ConfigError

RECIPES: dict[str, dict[str, Any]] = {
    # The dataclass defaults, untouched.
    "vanilla_gpt": {},
    # Small enough for a 2-core CPU: a step takes a few milliseconds, so scenarios run in seconds.
    "tiny_cpu": {
        "model.num_layers": 1,
        "model.hidden_size": 32,
        "model.num_attention_heads": 2,
        "model.seq_length": 32,
        "train.micro_batch_size": 2,
        "dataset.corpus_bytes": 16384,
        "dist.device": "cpu",
    },
    # About 125M parameters (GPT-2 small shape) for one GPU per rank.
    "gpt_125m": {
        "model.num_layers": 12,
        "model.hidden_size": 768,
        "model.num_attention_heads": 12,
        "model.seq_length": 1024,
        "model.bf16": True,
        "train.micro_batch_size": 8,
        "optimizer.lr": 6e-4,
        "optimizer.min_lr": 6e-5,
        "scheduler.lr_warmup_iters": 10,
        "dataset.corpus_bytes": 1 << 22,
        "dist.device": "cuda",
    },
}


def recipe_values(name: str) -> dict[str, Any]:
    if name not in RECIPES:
        raise ConfigError(f"unknown recipe {name!r}; known: {sorted(RECIPES)}")
    return RECIPES[name]
