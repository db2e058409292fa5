"""The training loop: build, resume, step, save, stop. Resiliency concerns plug in as Components."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import platform
import random
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed as dist

from runlog.layout import RunFolder
from runlog.log import EventLog
from runlog.records import Step
from trainer.checkpoint import Checkpointer, atomic_write_text
from trainer.components import Component, TrainContext
from trainer.config import OptimizerConfig, SchedulerConfig, TrainerConfig
from trainer.data import Sampler, WorkerBatches, build_corpus
from trainer.data_parallel import GradBuffers
from trainer.distributed import DistEnv, all_ranks_agree
from trainer.model import GPT
from trainer.optim import SGD, AdamW, Optimizer
from trainer.resiliency.preemption import worker_init_fn
from trainer.rng import rng_state, set_rng_state

log = logging.getLogger(__name__)


class LRSchedule:
    """Megatron's shape: linear warm-up, then linear or cosine decay to min_lr; state is the step count."""

    def __init__(self, cfg: SchedulerConfig, lr: float, min_lr: float, train_iters: int):
        self.cfg, self.lr, self.min_lr = cfg, lr, min_lr
        self.decay_iters = cfg.lr_decay_iters or train_iters
        self.num_steps = 0

    def current(self) -> float:
        n, warm = self.num_steps, self.cfg.lr_warmup_iters
        if warm and n < warm:
            return self.lr * (n + 1) / warm
        if self.cfg.lr_decay_style == "constant":
            return self.lr
        frac = min(1.0, (n - warm) / max(1, self.decay_iters - warm))
        coeff = 1.0 - frac if self.cfg.lr_decay_style == "linear" else 0.5 * (1.0 + math.cos(math.pi * frac))
        return self.min_lr + coeff * (self.lr - self.min_lr)

    def state_dict(self) -> dict[str, int]:
        return {"num_steps": self.num_steps}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.num_steps = int(state["num_steps"])


def use_deterministic_kernels() -> None:
    """Bit-reproducible CUDA steps: deterministic cuBLAS workspaces and no atomics-based kernels (strict mode:
    ``warn_only`` would keep flash attention's backward on its atomics).

    Uninitialized memory is not filled: the fill (torch's default in deterministic mode) only makes a kernel
    that reads memory it never wrote repeatable, costs a write of every fresh tensor, and the step's kernels
    write what they read (benchmarks/gpu_step.py checks that the steps repeat bit for bit).
    """
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    torch.backends.cudnn.benchmark = False


def adam_fused(o: OptimizerConfig, device: torch.device) -> bool:
    """AdamW's implementation: fused on GPU (one elementwise kernel per step instead of about ten per
    parameter, no atomics, so steps repeat bit for bit), the per-tensor loop on CPU (its numbers unchanged)."""
    return o.adam_impl == "auto" and device.type == "cuda"


def weights_digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def agree_to_stop(components: Sequence[Component], step: int, device: torch.device) -> str | None:
    """The step's stop vote: every rank stops at this step when any component on any rank asks to, or the ones
    that go on would hang in the next all-reduce. Returns this rank's own reason, else ``peer_stopped``.

    A signal that arrives while this rank waits in the vote's all-reduce is handled as the all-reduce returns,
    after the rank read its reasons: so a vote to stop asks the components again, and a rank that received the
    signal reports (and logs) it rather than only its peer's stop.
    """
    def reasons() -> list[str]:
        return [r for c in components if (r := c.stop_reason(step))]

    mine = reasons()
    if not all_ranks_agree(bool(mine), device):
        return None
    mine = mine or reasons()
    return mine[0] if mine else "peer_stopped"


class StepRunner(Protocol):
    """Computes a step's forward/backward (``compute(computation)``) as often as it decides; returns the local
    loss the optimizer steps with. The rerun state machine is one (trainer/resiliency/rerun_step.py)."""

    def run_step(self, host: Trainer, step: int, compute: Callable[[int], torch.Tensor]) -> torch.Tensor: ...


class SingleComputation:
    """No rerun machinery: the forward/backward runs once."""

    def run_step(self, host: Trainer, step: int, compute: Callable[[int], torch.Tensor]) -> torch.Tensor:
        return compute(0)


class Trainer:
    """Owns the model, optimizer, schedule and data, and runs the loop; implements Checkpointable, and the
    StepHost the rerun state machine steps through."""

    def __init__(
        self, cfg: TrainerConfig, env: DistEnv, events: EventLog, components: list[Component],
        step_runner: StepRunner | None = None,
    ):
        self.cfg, self.env, self.events, self.components = cfg, env, events, components
        self.iteration = 0
        tc = cfg.train
        gbs = tc.global_batch(env.world_size)
        if cfg.model.deterministic_mode and env.device.type == "cuda":
            use_deterministic_kernels()
        torch.manual_seed(cfg.rng.seed)
        random.seed(cfg.rng.seed)
        np.random.seed(cfg.rng.seed)
        self.model = GPT(cfg.model).to(env.device)
        self.grads = GradBuffers(self.model)
        self.optimizer = self._build_optimizer()
        self.schedule = LRSchedule(cfg.scheduler, cfg.optimizer.lr, cfg.optimizer.min_lr, tc.train_iters)
        corpus_seed = cfg.dataset.seed if cfg.dataset.seed is not None else cfg.rng.seed
        self.sampler = Sampler(
            build_corpus(corpus_seed, cfg.dataset.corpus_bytes), corpus_seed, cfg.model.seq_length,
            tc.micro_batch_size, gbs, env.rank, env.world_size,
        )
        self.batches: Sampler | WorkerBatches = self.sampler
        if cfg.dataset.num_workers:
            init = worker_init_fn(tc.exit_signal) if tc.exit_signal_handler_for_dataloader else None
            self.batches = WorkerBatches(self.sampler, cfg.dataset.num_workers, init)
        self.checkpointer = Checkpointer(cfg.checkpoint, events, env.rank, env.world_size, components)
        self.step_runner = step_runner or SingleComputation()

    def context(self) -> TrainContext:
        env = self.env
        return TrainContext(
            env.rank, env.world_size, env.local_rank, env.device, env.backend, self.sampler.num_microbatches,
            self.cfg.checkpoint.async_save,
        )

    def _build_optimizer(self) -> Optimizer:
        o = self.cfg.optimizer
        params = list(self.model.named_parameters())
        if o.optimizer == "sgd":
            return SGD(params, lr=o.lr, weight_decay=o.weight_decay)
        return AdamW(
            params, lr=o.lr, betas=(o.adam_beta1, o.adam_beta2), eps=o.adam_eps, weight_decay=o.weight_decay,
            fused=adam_fused(o, self.env.device),
        )

    # ------------------------------------------------------------------------------ Checkpointable
    def sharded_state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optim": self.optimizer.state_dict()}

    def load_sharded_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optim"])

    def rank_state_dict(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "schedule": self.schedule.state_dict(),
            "data": self.sampler.state_dict(),
            "rng": rng_state(),
            "resiliency": {c.name: c.state_dict() for c in self.components},
        }

    def load_rank_state_dict(self, state: dict[str, Any]) -> None:
        self.iteration = int(state["iteration"])
        self.schedule.load_state_dict(state["schedule"])
        self.sampler.load_state_dict(state["data"])
        set_rng_state(state["rng"])
        for c in self.components:
            c.load_state_dict(state["resiliency"].get(c.name, {}))

    # ------------------------------------------------------------------------------------ StepHost
    def data_state(self) -> dict[str, int]:
        return self.sampler.state_dict()

    def restore_data(self, state: dict[str, int]) -> None:
        self.sampler.load_state_dict(state)

    def save_checkpoint(self) -> bool:
        if self.checkpointer.root is None:
            return False
        self.checkpointer.save(self.iteration, self)
        return True

    def wait_for_saves(self) -> None:
        self.checkpointer.wait()

    # ------------------------------------------------------------------------------------ the loop
    @contextlib.contextmanager
    def section(self, name: str) -> Iterator[None]:
        for c in self.components:
            c.section_start(name)
        yield
        for c in self.components:
            c.section_end(name)

    def train(self) -> str:
        """Run to train_iters or until a component asks to stop; returns the exit reason."""
        self.iteration = self.checkpointer.load(self)
        if isinstance(self.batches, WorkerBatches):
            # Forked here, after the resume and before the components start (the exit-signal handler among
            # them): the workers start with the default signal handlers, as Bridge's do.
            self.batches.start()
        ctx = self.context()
        for c in self.components:
            c.on_train_start(ctx, self.iteration)
        reason = "completed"
        while self.iteration < self.cfg.train.train_iters:
            step = self.iteration + 1
            for c in self.components:
                c.before_step(step)
            t0 = time.perf_counter()
            with self.section("step"):
                loss = self.train_step(step)
            self.iteration = step
            self.log_step(loss, time.perf_counter() - t0)
            for c in self.components:
                c.after_step(step, loss)
            stop = self._stop_reason(step)
            if self.checkpointer.should_save(step) or (stop and self.checkpointer.root):
                with self.section("checkpointing"):
                    self.checkpointer.save(step, self)
            elif self.checkpointer.should_save_local(step):
                with self.section("checkpointing"):
                    self.checkpointer.local.save(step, self)
            self.checkpointer.poll()
            if stop:
                reason = stop
                break
        with self.section("checkpointing"):
            self.checkpointer.close()
        return reason

    def _stop_reason(self, step: int) -> str | None:
        interval = self.cfg.train.exit_interval
        if interval and step % interval == 0 and step < self.cfg.train.train_iters:
            return "exit_interval"
        return agree_to_stop(self.components, step, self.env.device)

    def train_step(self, step: int) -> float:
        """One optimizer step over the global batch; returns the loss averaged over data-parallel ranks.

        The rerun hook may compute the forward/backward more than once (same batch, same RNG) to validate
        its result, or stop the run (exit 16/17) before the optimizer has touched the weights.
        """
        local_loss = self.step_runner.run_step(self, step, lambda computation: self.forward_backward(step, computation))
        return self.optimizer_step(local_loss)

    def forward_backward(self, step: int, computation: int) -> torch.Tensor:
        """Gradients of this rank's micro-batches from a clean slate; returns its local loss (0-dim)."""
        self.optimizer.zero_grad()
        n_micro = self.sampler.num_microbatches
        total = torch.zeros((), device=self.env.device)
        for micro in range(n_micro):
            x, y = (t.to(self.env.device) for t in self.batches.batch(micro))
            with torch.autocast(self.env.device.type, torch.bfloat16, enabled=self.cfg.model.bf16):
                loss = self._forward(step, micro, x, y) / n_micro
                for c in self.components:
                    loss = c.on_loss(step, computation, loss)
            loss.backward()
            total += loss.detach()
        self.grads.reduce(lambda bucket: self._before_grad_reduce(step, bucket))
        return total

    def _before_grad_reduce(self, step: int, bucket: int) -> None:
        for c in self.components:
            c.before_grad_reduce(step, bucket)

    def _forward(self, step: int, micro: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The forward pass inside every component's forward span. The spans nest (the last opened is closed
        first), so a slowdown one component adds falls inside another's timing of the same pass."""
        for c in self.components:
            c.before_forward(step, micro)
        out = self.model(x, y)
        for c in reversed(self.components):
            c.after_forward(step, micro)
        return out

    def optimizer_step(self, local_loss: torch.Tensor) -> float:
        """Apply the gradients, advance schedule and data; returns the loss averaged over ranks."""
        lr = self.schedule.current()
        self.optimizer.lr = lr
        if self.cfg.optimizer.clip_grad > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.optimizer.clip_grad)
        self.optimizer.step()
        self.schedule.num_steps += 1
        self.sampler.advance()
        dist.all_reduce(local_loss)
        return local_loss.item() / self.env.world_size

    def log_step(self, loss: float, step_time: float) -> None:
        lr = self.optimizer.lr
        self.events.write(Step(self.iteration, loss, lr, step_time, self.sampler.consumed_samples))
        if self.env.rank == 0 and self.iteration % self.cfg.logger.log_interval == 0:
            print(
                f"iteration {self.iteration}/{self.cfg.train.train_iters} | lm loss {loss:.6E} | "
                f"lr {lr:.3E} | step time {step_time * 1000:.1f} ms",
                flush=True,
            )

    def close(self) -> None:
        """Stop the data-loader workers, if any (also after an error)."""
        if isinstance(self.batches, WorkerBatches):
            self.batches.close()

    def save_final_weights(self) -> str:
        """Rank 0 writes <run_dir>/final_weights.pt (atomically); every rank returns the digest."""
        digest = weights_digest(self.model)
        run_dir = self.cfg.logger.run_dir
        if run_dir and self.env.rank == 0:
            folder = RunFolder(Path(run_dir))
            tmp = folder.final_weights.with_name(f".{folder.final_weights.name}.tmp")
            torch.save({k: v.detach().cpu() for k, v in self.model.state_dict().items()}, tmp)
            os.replace(tmp, folder.final_weights)
            atomic_write_text(folder.final_weights_digest, digest + "\n")
        return digest


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        nvrx = version("nvidia-resiliency-ext")
    except PackageNotFoundError:
        nvrx = "absent"
    return {"torch": torch.__version__, "nvrx": nvrx, "python": platform.python_version()}
