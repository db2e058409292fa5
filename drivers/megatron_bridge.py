"""Megatron Bridge GPT pretraining driver: a recipe plus dotted overrides, as Bridge's run_recipe.py takes them.

Bridge's ``scripts/training/run_recipe.py`` is a repository script, not part of the megatron-bridge
wheel. This driver does what it does for GPT pretraining: it builds a recipe's ``ConfigContainer``
(default ``vanilla_gpt_pretrain_config``, Bridge's recipe for Megatron-LM/Bridge correlation), applies
Hydra-style dotted overrides with Bridge's own ``process_config_with_overrides``, keeps
``model.seq_length`` in step with ``dataset.seq_length``, and calls Bridge's ``pretrain`` with its
``gpt_step.forward_step``::

    torchrun --standalone --nproc-per-node=1 drivers/megatron_bridge.py \\
        model.num_layers=2 model.hidden_size=256 model.num_attention_heads=4 \\
        train.train_iters=10 checkpoint.save=/tmp/ck ft.enable_ft_package=true ft.simulate_fault=true

Two things a run_recipe.py user gets from a full NeMo container, which this driver supplies:

- Optional sections the recipe leaves unset (``ft``, ``straggler``, ``nvrx_straggler``,
  ``inprocess_restart``) are created with their defaults when an override names them, so
  ``ft.enable_ft_package=true`` works on ``vanilla_gpt_pretrain_config``.
- Without Transformer Engine (the lent GPU machines have none), Bridge has no automatic fallback:
  the model gets Bridge's ``local_layer_spec`` and ``masked_softmax_fusion=False``, and a line says so.
- Without APEX, gradient accumulation fusion off (``no_wgrad_fusion_without_apex``), and a line says so.

``--chaos-plan {run_dir}/plan.json`` (a scenario's command names it) arms the harness's faults that strike
inside a rank before an iteration (``gpu_oom``): Bridge's forward step is wrapped so that the plan's faults of
this rank see each iteration before its first forward pass (chaos/hooks/seam.py). Without it nothing of the
harness is imported.

It runs on a GPU machine with megatron-bridge installed (tools/megatron-gpu-setup.sh); nothing on the
CPU machines imports it. ``pretrain`` sits behind ``if __name__ == "__main__":`` because Bridge's async
checkpoint writer starts processes with ``spawn``, which re-import this module.
"""

from __future__ import annotations

import argparse
import importlib.util

# Every Bridge import is inside the functions: a torch_dist save starts a multiprocessing Manager with the
# spawn method (megatron.core's get_write_results_queue), and the async writer spawns too; each imports this
# script again as __mp_main__, which with the imports here at the top cost 25-37 s (all of megatron.bridge)
# per first save on the lent H200 (2026-12-01).
OPTIONAL_SECTIONS = {
    "ft": "FaultToleranceConfig",
    "straggler": "StragglerDetectionConfig",
    "nvrx_straggler": "NVRxStragglerDetectionConfig",
    "inprocess_restart": "InProcessRestartConfig",
}
"""Optional ConfigContainer sections, by the name of their class in megatron.bridge.training.config."""


def te_available() -> bool:
    """Whether Transformer Engine is installed."""
    return importlib.util.find_spec("transformer_engine") is not None


def load_recipe(name: str):
    """The ConfigContainer of a recipe exported by megatron.bridge.recipes, called without arguments."""
    from megatron.bridge import recipes

    builder = getattr(recipes, name, None)
    if builder is None:
        raise SystemExit(f"drivers/megatron_bridge.py: megatron.bridge.recipes has no recipe {name!r}")
    return builder()


def add_named_sections(cfg, overrides: list[str]) -> None:
    """Create each optional section an override names and the recipe left as None."""
    from megatron.bridge.training import config

    for override in overrides:
        section = override.lstrip("+~").split(".", 1)[0]
        if section in OPTIONAL_SECTIONS and getattr(cfg, section) is None:
            setattr(cfg, section, getattr(config, OPTIONAL_SECTIONS[section])())


def use_local_spec_without_te(cfg) -> None:
    """Bridge's local (non-TE) layer spec and no fused masked softmax where TE is not installed."""
    if te_available():
        return
    from megatron.bridge.models.gpt_provider import local_layer_spec

    cfg.model.transformer_layer_spec = local_layer_spec
    cfg.model.masked_softmax_fusion = False
    print("drivers/megatron_bridge.py: Transformer Engine is not installed: model uses local_layer_spec", flush=True)


def no_wgrad_fusion_without_apex(cfg) -> None:
    """Gradient accumulation fusion off where APEX's fused_weight_gradient_mlp_cuda is missing.

    Bridge 0.6.2 turns it on whenever TE imports (``fusions.can_enable_gradient_accumulation_fusion``), but
    GPT's output layer is Megatron-Core's ColumnParallelLinear, which needs APEX's kernel for it: with TE and
    without APEX the first step raises "... fused_weight_gradient_mlp_cuda module is not found" (1x H100,
    2026-12-06; bridge_te_wgrad_fusion_without_apex keeps it as a known failure). An override that sets
    ``model.gradient_accumulation_fusion`` wins (overrides come after)."""
    if importlib.util.find_spec("fused_weight_gradient_mlp_cuda") is not None or not cfg.model.gradient_accumulation_fusion:
        return
    cfg.model.gradient_accumulation_fusion = False
    print("drivers/megatron_bridge.py: APEX's fused_weight_gradient_mlp_cuda is not installed: gradient_accumulation_fusion off", flush=True)


def build_config(recipe: str, overrides: list[str]):
    """The recipe with the TE and APEX fallbacks, the named sections and the overrides applied."""
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    cfg = load_recipe(recipe)
    use_local_spec_without_te(cfg)
    no_wgrad_fusion_without_apex(cfg)
    add_named_sections(cfg, overrides)
    cfg = process_config_with_overrides(cfg, cli_overrides=overrides or None)
    if cfg.dataset is not None and getattr(cfg.dataset, "seq_length", None) is not None:
        cfg.model.seq_length = cfg.dataset.seq_length
    return cfg


def armed(forward_step, plan: str, cfg):
    """`forward_step` with the plan's faults of this rank fired before each iteration's first forward pass.

    Bridge passes its GlobalState as the first argument when the function's signature (followed through
    functools.wraps) starts with ``state``; ``state.train_state.step`` counts the iterations done, so the one
    being computed is one more (Megatron's log numbers it so too).
    """
    import functools
    import os

    import torch

    from chaos.hooks.seam import StepSeam
    from trainer.components import TrainContext

    seam: StepSeam | None = None

    @functools.wraps(forward_step)
    def step(state, *args, **kwargs):
        nonlocal seam
        if seam is None:
            world, local = torch.distributed.get_world_size(), int(os.environ.get("LOCAL_RANK", "0"))
            ctx = TrainContext(
                rank=torch.distributed.get_rank(), world_size=world, local_rank=local,
                device=torch.device("cuda", torch.cuda.current_device()), backend=torch.distributed.get_backend(),
                microbatches=cfg.train.global_batch_size // (cfg.train.micro_batch_size * world),
                async_saves=bool(cfg.checkpoint.async_save),
            )
            seam = StepSeam(plan, ctx)
        seam.before(state.train_state.step + 1)
        return forward_step(state, *args, **kwargs)

    return step


def main() -> None:
    """Parse --recipe, --chaos-plan and the dotted overrides, then run Bridge's pretraining."""
    from megatron.bridge.training.gpt_step import forward_step
    from megatron.bridge.training.pretrain import pretrain

    parser = argparse.ArgumentParser(description="Megatron Bridge GPT pretraining from a recipe")
    parser.add_argument("--recipe", default="vanilla_gpt_pretrain_config", help="a megatron.bridge.recipes name")
    parser.add_argument("--chaos-plan", help="the run's plan.json: fire its in-rank faults before their iteration")
    args, overrides = parser.parse_known_args()
    cfg = build_config(args.recipe, overrides)
    step = forward_step if args.chaos_plan is None else armed(forward_step, args.chaos_plan, cfg)
    pretrain(config=cfg, forward_step_func=step)


if __name__ == "__main__":
    main()
