"""Smallest reproduction: Megatron-Core's DistributedOptimizer cannot build its load-time state dict
before its first step when neither Transformer Engine nor APEX is installed.

Resuming from a ``torch_dist`` checkpoint calls ``optimizer.sharded_state_dict(model_sd,
is_loading=True)`` on a freshly built optimizer (megatron.training and Bridge's
``generate_state_dict`` both do). ``DistributedOptimizer.sharded_state_dict`` first calls
``self.state_dict()``, whose branch for plain ``torch.optim.Adam`` (taken when TE's and APEX's fused
Adam do not import) collects the distinct ``step`` values of the inner optimizer's state and asserts
there is exactly one: a fresh optimizer has no state yet, so the list is empty and the assert fails
(``distrib_optimizer.py: assert len(steps) == 1``). After one optimizer step the state holds one
``step`` and the assert passes.

This script shows both on one GPU with megatron.core alone (no megatron.training, no Bridge, no
checkpoint on disk)::

    torchrun --standalone --nproc-per-node=1 drivers/repro_distopt_load.py

It prints ``fresh optimizer: AssertionError at distrib_optimizer.py:839 assert len(steps) == 1`` where
the bug is present, then ``after one step: ...``, and exits 0 (it reports, it does not judge). Both calls
pass the metadata the checkpoint loaders pass (``dp_reshardable``). GPU machines only; nothing imports it.
"""

from __future__ import annotations

import os
import sys
import traceback

import torch
from megatron.core import parallel_state
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.optimizer import OptimizerConfig, distrib_optimizer, get_megatron_optimizer
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.transformer.transformer_config import TransformerConfig

VOCAB, SEQ = 128, 16
# What megatron.training and Bridge pass when they load a torch_dist checkpoint written with the
# distributed optimizer (read back from the checkpoint as "sharded_state_dict metadata").
LOAD_METADATA = {"distrib_optim_sharding_type": "dp_reshardable", "singleton_local_shards": False,
                 "chained_optim_avoid_prefix": True}


def build():
    """A one-layer GPT wrapped in Megatron DDP, and a distributed Adam over it."""
    config = TransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=4, use_cpu_initialization=True)
    model = GPTModel(config, get_gpt_layer_local_spec(), vocab_size=VOCAB, max_sequence_length=SEQ).cuda()
    ddp = DistributedDataParallel(config, DistributedDataParallelConfig(use_distributed_optimizer=True), model)
    optimizer = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=1e-3, use_distributed_optimizer=True), [ddp])
    return ddp, optimizer


def try_load_state_dict(label: str, ddp, optimizer) -> None:
    """Build the optimizer's load-time sharded state dict, as a checkpoint resume does, and report."""
    try:
        optimizer.sharded_state_dict(ddp.module.sharded_state_dict(), is_loading=True, metadata=LOAD_METADATA)
        print(f"{label}: ok", flush=True)
    except Exception as error:  # the script reports whichever error Megatron raises
        frame = traceback.extract_tb(sys.exc_info()[2])[-1]
        where = f"{os.path.basename(frame.filename)}:{frame.lineno} {frame.line}"
        print(f"{label}: {type(error).__name__} at {where} {error}".rstrip(), flush=True)


def one_step(ddp, optimizer) -> None:
    """One forward, backward and optimizer step on random tokens."""
    tokens = torch.randint(0, VOCAB, (2, SEQ), device="cuda")
    positions = torch.arange(SEQ, device="cuda").expand(2, SEQ)
    ddp.zero_grad_buffer()
    optimizer.zero_grad()
    ddp(tokens, positions, None, labels=tokens).float().mean().backward()
    ddp.finish_grad_sync()
    optimizer.step()


def main() -> None:
    """Show the fresh-optimizer failure and the post-step success."""
    torch.distributed.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    parallel_state.initialize_model_parallel()
    model_parallel_cuda_manual_seed(1234)
    print(f"TE or APEX fused Adam in use: {distrib_optimizer.HAVE_APEX_OR_TE}", flush=True)
    ddp, optimizer = build()
    try_load_state_dict("fresh optimizer", ddp, optimizer)
    one_step(ddp, optimizer)
    try_load_state_dict("after one step", ddp, optimizer)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
