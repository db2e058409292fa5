"""Megatron-LM-style GPT pretraining driver over the installed ``megatron.training`` (megatron-core 0.19).

Megatron-LM's ``pretrain_gpt.py`` is a script of the Megatron-LM repository, not of the megatron-core
wheel, which ships only ``megatron.training``. This driver does what that script does, so that a real
Megatron-LM training loop runs from the wheel alone: it parses Megatron-LM's own command line
(``parse_and_validate_args``), builds the config container, and calls ``megatron.training.pretrain``
with

- a model provider that builds ``GPTModel`` with the Transformer Engine layer spec when TE imports and
  ``--transformer-impl transformer_engine`` (the default) is asked for, and otherwise with
  ``get_gpt_layer_local_spec`` (pass ``--transformer-impl local --no-gradient-accumulation-fusion
  --no-persist-layer-norm --no-masked-softmax-fusion`` on a machine without TE and APEX);
- megatron.core's ``GPTDataset`` / ``MockGPTDataset`` (``--mock-data``) through
  ``BlendedMegatronDatasetBuilder``;
- a ``forward_step`` and loss function that report ``lm loss`` and call the rerun state machine's
  NaN/Inf (and, with ``--check-for-spiky-loss``, spiky-loss) validation as pretrain_gpt.py does, so that
  ``--rerun-mode validate_results --error-injection-rate N --error-injection-type ...`` exits 16/17.

Every other Megatron-LM flag works as in Megatron-LM because ``megatron.training`` reads it: FT
(``--enable-ft-package --calc-ft-timeouts`` under ``ft_launcher``), Megatron-Core's fault injector
(``--fault-injector-ranks --fault-injector-fault-types --fault-injector-fault-delay
--fault-injector-delay-start-iteration``), ``--exit-signal-handler``, ``--tensorboard-dir``,
``--save/--load/--save-interval``, ``--use-distributed-optimizer``, ``--ckpt-format``, ``--async-save``.

It runs on a GPU machine with megatron-core installed (tools/megatron-gpu-setup.sh); nothing on the
CPU machines imports it. Example (one GPU)::

    torchrun --standalone --nproc-per-node=1 drivers/megatron_lm.py --num-layers 2 --hidden-size 256 \\
        --num-attention-heads 4 --seq-length 512 --max-position-embeddings 512 --micro-batch-size 4 \\
        --global-batch-size 32 --train-iters 10 --lr 3e-4 --mock-data --tokenizer-type NullTokenizer \\
        --vocab-size 32000 --bf16 --seed 1234 --transformer-impl local --no-gradient-accumulation-fusion \\
        --no-persist-layer-norm --no-masked-softmax-fusion --log-interval 1
"""

from __future__ import annotations

import importlib.util
from functools import partial

# Every Megatron and torch import is inside the functions: megatron.core's first torch_dist save starts a
# multiprocessing Manager with the spawn method, which imports this script again as __mp_main__; with the
# imports here at the top, that re-import cost 25-37 s per first save on the lent H200 (2026-12-01).

SPIKY_LOSS_FACTOR = 10  # pretrain_gpt.py's: a loss 10x the largest seen so far is spiky


def te_available() -> bool:
    """Whether Transformer Engine is installed (the lent GPU machines have none by default)."""
    return importlib.util.find_spec("transformer_engine") is not None


def layer_spec(args, config):
    """TE layer spec where TE is installed and asked for, else Megatron-Core's local spec."""
    from megatron.core.models.gpt.gpt_layer_specs import (
        get_gpt_layer_local_spec,
        get_gpt_layer_with_transformer_engine_spec,
    )
    from megatron.training import print_rank_0

    if args.transformer_impl == "transformer_engine" and te_available():
        return get_gpt_layer_with_transformer_engine_spec(
            config.num_moe_experts, config.moe_grouped_gemm, config.qk_layernorm
        )
    if args.transformer_impl == "transformer_engine":
        print_rank_0("> Transformer Engine is not installed: building GPT with the local layer spec")
    return get_gpt_layer_local_spec(
        config.num_moe_experts, config.moe_grouped_gemm, config.qk_layernorm, normalization=config.normalization
    )


def model_provider(pre_process=True, post_process=True, config=None, pg_collection=None, vp_stage=None):
    """Build one GPTModel stage from the command-line arguments (pretrain_gpt.py's model provider)."""
    from megatron.core.models.gpt import GPTModel
    from megatron.training import get_args
    from megatron.training.arguments import core_transformer_config_from_args

    args = get_args()
    config = config or core_transformer_config_from_args(args)
    return GPTModel(
        config=config,
        transformer_layer_spec=layer_spec(args, config),
        vocab_size=args.padded_vocab_size,
        max_sequence_length=args.max_position_embeddings,
        pre_process=pre_process,
        post_process=post_process,
        fp16_lm_cross_entropy=args.fp16_lm_cross_entropy,
        parallel_output=True,
        share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights,
        position_embedding_type=args.position_embedding_type,
        rotary_percent=args.rotary_percent,
        rotary_base=args.rotary_base,
        pg_collection=pg_collection,
        vp_stage=vp_stage,
    )


def loss_func(loss_mask, output_tensor):
    """Summed masked LM loss, its token count, and the rerun state machine's validations."""
    import torch
    from megatron.core.rerun_state_machine import get_rerun_state_machine
    from megatron.training import get_args

    args = get_args()
    losses = output_tensor.view(-1).float()
    mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * mask)
    num_tokens = mask.sum().clone().detach().to(torch.int)
    report = {"lm loss": torch.cat([loss.clone().detach().view(1), num_tokens.view(1)])}

    rerun_state_machine = get_rerun_state_machine()
    if args.check_for_nan_in_loss_and_grad:
        for rejection_func, what in ((torch.isnan, "NaN"), (torch.isinf, "Inf")):
            rerun_state_machine.validate_result(
                result=loss,
                rejection_func=rejection_func,
                message=f"found {what} in local forward loss calculation",
                tolerance=0.0,  # the forward pass is deterministic
                fatal=True,
            )
    if args.check_for_spiky_loss:
        rerun_state_machine.validate_result(
            result=loss,
            rejection_func=partial(
                rerun_state_machine.is_unexpectedly_large, threshold=SPIKY_LOSS_FACTOR, context="loss"
            ),
            message="Spiky loss",
            tolerance=0.0,
            fatal=False,
        )
    return loss, num_tokens, report


def get_batch(data_iterator):
    """The next micro-batch on this GPU: tokens, labels, loss mask, attention mask, position ids."""
    data = next(data_iterator)
    return tuple(
        None if data.get(key) is None else data[key].cuda(non_blocking=True)
        for key in ("tokens", "labels", "loss_mask", "attention_mask", "position_ids")
    )


def forward_step(data_iterator, model):
    """One micro-batch forward; Megatron's schedule applies the returned loss function."""
    tokens, labels, loss_mask, attention_mask, position_ids = get_batch(data_iterator)
    output_tensor = model(tokens, position_ids, attention_mask, labels=labels, loss_mask=loss_mask)
    return output_tensor, partial(loss_func, loss_mask)


def dataset_config(args):
    """megatron.core's GPT dataset config from the command line (blend, split, tokenizer)."""
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig
    from megatron.training import get_tokenizer
    from megatron.training.utils import get_blend_and_blend_per_split

    blend, blend_per_split = get_blend_and_blend_per_split(args)
    return GPTDatasetConfig(
        random_seed=args.seed,
        sequence_length=args.seq_length,
        blend=blend,
        blend_per_split=blend_per_split,
        split=args.split,
        path_to_cache=args.data_cache_path,
        tokenizer=get_tokenizer(),
        reset_position_ids=args.reset_position_ids,
        reset_attention_mask=args.reset_attention_mask,
        eod_mask_loss=args.eod_mask_loss,
        create_attention_mask=args.create_attention_mask_in_dataloader,
    )


def train_valid_test_datasets_provider(train_val_test_num_samples, vp_stage=None):
    """Train, validation and test datasets: MockGPTDataset with --mock-data, else GPTDataset."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, MockGPTDataset
    from megatron.training import get_args, print_rank_0

    args = get_args()
    dataset_type = MockGPTDataset if args.mock_data else GPTDataset
    print_rank_0("> building train, validation, and test datasets for GPT ...")
    datasets = BlendedMegatronDatasetBuilder(
        dataset_type, train_val_test_num_samples, lambda: True, dataset_config(args)
    ).build()
    print_rank_0("> finished creating GPT datasets ...")
    return datasets


def check_parallelism(args) -> None:
    """This driver feeds each GPU its own batches: data parallelism only (no TP, PP or CP)."""
    sizes = {
        "--tensor-model-parallel-size": args.tensor_model_parallel_size,
        "--pipeline-model-parallel-size": args.pipeline_model_parallel_size,
        "--context-parallel-size": args.context_parallel_size,
    }
    wrong = [f"{flag} {size}" for flag, size in sizes.items() if size != 1]
    if wrong:
        raise SystemExit(f"drivers/megatron_lm.py runs data parallelism only; got {', '.join(wrong)}")


def main() -> None:
    """Parse Megatron-LM's command line and run megatron.training's pretraining loop."""
    from megatron.core.enums import ModelType
    from megatron.training import pretrain
    from megatron.training.argument_utils import pretrain_cfg_container_from_args
    from megatron.training.arguments import parse_and_validate_args

    train_valid_test_datasets_provider.is_distributed = True
    args = parse_and_validate_args(args_defaults={"tokenizer_type": "GPT2BPETokenizer"})
    check_parallelism(args)
    pretrain(
        pretrain_cfg_container_from_args(args),
        train_valid_test_datasets_provider,
        ModelType.encoder_or_decoder,
        forward_step,
        model_provider=model_provider,
    )


if __name__ == "__main__":  # Megatron's spawned processes import this module again (above)
    main()
