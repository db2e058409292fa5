"""Trainer configuration: dataclasses named and defaulted like Megatron Bridge's (trainer/config_loader.py
builds them from a recipe, a YAML file and dotted overrides).

Every section checks its own values and TrainerConfig the cross-field rules; a bad value raises
:class:`ConfigError` with a one-line message naming it. These are all the checks the trainer makes of its
config (torch's own among them: the optimizer's ranges, dropout probabilities), so that a config that
builds also starts; the one check that needs the world size is ``TrainConfig.global_batch``. This module
imports no torch, so the chaos layer can validate a scenario's overrides before anything is launched.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from runlog import pitfalls
from trainer.config_base import ConfigError, check_seed
from trainer.config_resiliency import (
    FaultInjectionConfig,
    FaultToleranceConfig,
    InProcessRestartConfig,
    NVRxStragglerDetectionConfig,
    RerunStateMachineConfig,
    StragglerDetectionConfig,
)


@dataclass(kw_only=True)
class ModelConfig:
    """A decoder-only GPT; sizes as in Bridge's GPTConfig."""

    impl: Literal["torch", "te"] = "torch"
    """'torch': plain torch layers (always available); 'te': Transformer Engine layers (GPU extra)."""
    num_layers: int = 2
    hidden_size: int = 64
    num_attention_heads: int = 4
    ffn_hidden_size: int | None = None
    """Defaults to 4 * hidden_size."""
    seq_length: int = 64
    vocab_size: int = 256
    """Byte-level tokenizer: 256 symbols."""
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    init_method_std: float = 0.02
    bf16: bool = False
    """Autocast to bfloat16 (GPU recipes)."""
    deterministic_mode: bool = True
    """Deterministic kernels on GPU (deterministic cuBLAS and attention backward), so a resumed run is bit-identical."""
    attention_backend: Literal["auto", "math"] = "auto"
    """'auto': the fastest attention kernels the determinism setting allows (trainer/model.py
    attention_backends); 'math': the unfused math kernel always (what deterministic_mode used before; a
    reference, or a way around a fused kernel that fails on some stack)."""

    def __post_init__(self) -> None:
        for key in ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "ffn_hidden_size"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                raise ConfigError(f"model.{key}: must be >= 1, got {getattr(self, key)}")
        if self.vocab_size < 256:
            raise ConfigError(f"model.vocab_size: must be >= 256 (the tokenizer is byte-level), got {self.vocab_size}")
        for key in ("hidden_dropout", "attention_dropout"):
            if not 0 <= getattr(self, key) <= 1:
                raise ConfigError(f"model.{key}: a probability in [0, 1], got {getattr(self, key)}")
        if self.init_method_std < 0:
            raise ConfigError(f"model.init_method_std: must be >= 0, got {self.init_method_std}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"model.hidden_size ({self.hidden_size}) must be divisible by "
                f"model.num_attention_heads ({self.num_attention_heads})"
            )
        if self.ffn_hidden_size is None:
            self.ffn_hidden_size = 4 * self.hidden_size


@dataclass(kw_only=True)
class DatasetConfig:
    """The deterministic synthetic corpus (see trainer/data.py)."""

    corpus_bytes: int = 1 << 16
    """Size of the generated text corpus; samples are windows of seq_length+1 bytes into it."""
    seed: int | None = None
    """Corpus seed; defaults to rng.seed."""
    num_workers: int = 0
    """Data-loader worker processes per rank (Bridge's dataset.num_workers, whose default is 2): 0 serves the
    batches in the training process; N > 0 serves the same batches from a torch DataLoader's N workers."""

    def __post_init__(self) -> None:
        if self.num_workers < 0:
            raise ConfigError(f"dataset.num_workers: must be >= 0, got {self.num_workers}")
        if self.seed is not None:
            check_seed("dataset.seed", self.seed)


@dataclass(kw_only=True)
class TrainConfig:
    train_iters: int = 20
    micro_batch_size: int = 4
    global_batch_size: int | None = None
    """Defaults to micro_batch_size * data-parallel size (no gradient accumulation)."""
    exit_signal_handler: bool = False
    """Megatron Bridge's DistributedSignalHandler: on exit_signal, all ranks save and exit cleanly."""
    exit_signal: str = "SIGTERM"
    exit_signal_handler_for_dataloader: bool = False
    """Bridge's worker_init_fn: each data-loader worker installs the same recording handler, so a signal sent
    to the whole process group (as a scheduler sends it) does not kill the workers under the training step."""
    exit_interval: int | None = None
    """Stop (after saving) once iteration % exit_interval == 0, as Megatron's --exit-interval."""

    def __post_init__(self) -> None:
        parse_signal(self.exit_signal)
        if self.exit_interval is not None and self.exit_interval < 1:
            raise ConfigError(f"train.exit_interval: must be >= 1 or null, got {self.exit_interval}")

    def global_batch(self, world_size: int) -> int:
        """The global batch of a data-parallel world of `world_size` (given, or one micro-batch per rank);
        ConfigError when it does not split into whole micro-batches on every rank. The trainer checks it at
        start, the harness when it validates a scenario (its world size)."""
        gbs = self.global_batch_size or self.micro_batch_size * world_size
        if gbs % (self.micro_batch_size * world_size):
            raise ConfigError(
                f"train.global_batch_size ({gbs}) must be a multiple of micro_batch_size x world size "
                f"({self.micro_batch_size} x {world_size})"
            )
        return gbs


def parse_signal(name: str) -> signal.Signals:
    """`SIGTERM`, `SIGUSR1`, ... as a signal (train.exit_signal); SIGKILL and SIGSTOP cannot be handled."""
    try:
        sig = signal.Signals[name]
    except KeyError:
        raise ConfigError(f"train.exit_signal: unknown signal {name!r} (e.g. SIGTERM, SIGUSR1)") from None
    if sig in (signal.SIGKILL, signal.SIGSTOP):
        raise ConfigError(f"train.exit_signal: {name} cannot be caught; use SIGTERM, SIGINT or SIGUSR1/2")
    return sig


@dataclass(kw_only=True)
class OptimizerConfig:
    optimizer: Literal["adam", "sgd"] = "adam"
    lr: float = 1e-3
    min_lr: float = 1e-5
    weight_decay: float = 0.01
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_eps: float = 1e-8
    clip_grad: float = 1.0
    """0 or less: no clipping."""
    adam_impl: Literal["auto", "for_loop"] = "auto"
    """'auto': torch's fused AdamW on GPU (elementwise, no atomics: bit-reproducible run to run), the
    per-tensor loop on CPU; 'for_loop': the per-tensor loop everywhere (``foreach=False``, as before)."""

    def __post_init__(self) -> None:
        """The ranges torch's optimizers refuse at construction, refused here first."""
        for key in ("lr", "min_lr", "weight_decay", "adam_eps"):
            if getattr(self, key) < 0:
                raise ConfigError(f"optimizer.{key}: must be >= 0, got {getattr(self, key)}")
        for key in ("adam_beta1", "adam_beta2"):
            if not 0 <= getattr(self, key) < 1:
                raise ConfigError(f"optimizer.{key}: must be in [0, 1), got {getattr(self, key)}")


@dataclass(kw_only=True)
class SchedulerConfig:
    lr_decay_style: Literal["constant", "linear", "cosine"] = "cosine"
    lr_warmup_iters: int = 2
    lr_decay_iters: int | None = None
    """Defaults to train.train_iters."""

    def __post_init__(self) -> None:
        if self.lr_warmup_iters < 0:
            raise ConfigError(f"scheduler.lr_warmup_iters: must be >= 0, got {self.lr_warmup_iters}")


@dataclass(kw_only=True)
class CheckpointConfig:
    save: str | None = None
    """Folder for checkpoints; None disables saving."""
    load: str | None = None
    """Folder to resume from; None means auto-resume from `save` (announced loudly)."""
    save_interval: int | None = None
    async_save: bool = False
    """torch DCP async_save on a dedicated gloo group: training continues while writing."""
    ckpt_format: Literal["torch", "torch_dist", "torch_dcp", "fsdp_dtensor"] = "torch_dist"
    """Megatron's names; this trainer writes torch_dist (DCP) only and refuses the others."""
    most_recent_k: int = -1
    """Keep only the newest k good checkpoints (-1 keeps all)."""
    verify_on_load: bool = True
    """Check every file against the manifest's sha256 before loading."""
    on_save_failure: Literal["exit", "skip"] = "exit"
    """A save the storage refuses (ENOSPC, EIO): 'exit' ends the rank with reason checkpoint_failed (for the
    launcher to restart it), 'skip' goes on training without that checkpoint."""
    non_persistent_ckpt_type: Literal["global", "local", "in_memory"] | None = None
    """'local': NVRx local checkpoints (LocalCheckpointManager) beside the persistent ones; 'global' and
    'in_memory' are Megatron's other kinds, not implemented here (refused)."""
    non_persistent_save_interval: int | None = None
    """Steps between local checkpoints (a step that is also a persistent save step saves the persistent one)."""
    non_persistent_local_ckpt_dir: str | None = None
    """The node-local folder; the trainer keeps each node's checkpoints under <dir>/<node identity>."""
    non_persistent_local_ckpt_algo: Literal["fully_parallel", "atomic"] = "fully_parallel"
    """'fully_parallel': the data-parallel replicas split the replicated tensors, each rank writes its share
    and the ranks exchange them on load; 'atomic': every rank writes (and reads back) all of its tensors."""

    def __post_init__(self) -> None:
        if self.ckpt_format != "torch_dist":
            if self.async_save:
                raise ConfigError(
                    f"checkpoint.async_save with checkpoint.ckpt_format {self.ckpt_format!r}: the resiliency card's "
                    f"pitfall: {pitfalls.CARD[pitfalls.ASYNC_SAVE_WITHOUT_TORCH_DIST]}",
                    pitfall=pitfalls.ASYNC_SAVE_WITHOUT_TORCH_DIST,
                )
            raise ConfigError(f"checkpoint.ckpt_format: {self.ckpt_format!r} is not implemented here; use torch_dist")
        if self.non_persistent_ckpt_type not in (None, "local"):
            raise ConfigError(
                f"checkpoint.non_persistent_ckpt_type: {self.non_persistent_ckpt_type!r} is not implemented here; "
                "use local (NVRx local checkpoints) or null"
            )
        if self.non_persistent_save_interval is not None and self.non_persistent_save_interval < 1:
            raise ConfigError(f"checkpoint.non_persistent_save_interval: must be >= 1, got {self.non_persistent_save_interval}")
        if self.most_recent_k == 0 or self.most_recent_k < -1:
            raise ConfigError(f"checkpoint.most_recent_k: -1 (keep all) or >= 1, got {self.most_recent_k}")

    @property
    def local(self) -> bool:
        """Whether NVRx local checkpoints are on (TrainerConfig checks that their folder and interval are set)."""
        return self.non_persistent_ckpt_type == "local"


@dataclass(kw_only=True)
class RNGConfig:
    seed: int = 1234

    def __post_init__(self) -> None:
        check_seed("rng.seed", self.seed)


@dataclass(kw_only=True)
class LoggerConfig:
    log_interval: int = 1
    run_dir: str | None = None
    """Where the event log (<run_dir>/events/rank-<r>.jsonl) and final weights go; None: no events."""


@dataclass(kw_only=True)
class DistConfig:
    distributed_backend: Literal["auto", "gloo", "nccl"] = "auto"
    """'auto': NCCL when CUDA is available, else gloo."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    distributed_timeout_minutes: float = 10
    """The process group's collective timeout (a fraction for seconds: gloo raises in the rank when it passes)."""

    def __post_init__(self) -> None:
        if self.distributed_backend == "nccl" and self.device == "cpu":
            raise ConfigError("dist.distributed_backend=nccl needs GPUs: set dist.device to cuda (or auto), or use gloo")
        if self.distributed_timeout_minutes <= 0:
            raise ConfigError(f"dist.distributed_timeout_minutes: must be > 0, got {self.distributed_timeout_minutes:g}")


_NVIDIA_DRIVER = ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/dxg")
"""What the NVIDIA driver shows where it is loaded (Linux, a GPU container, WSL); without it torch has no CUDA."""


def cuda_available() -> bool:
    """``torch.cuda.is_available()``, without importing torch on a machine with no NVIDIA driver: the harness
    asks it of every scenario before launching, and torch's import (2 s) would delay every run by that much."""
    if not any(Path(p).exists() for p in _NVIDIA_DRIVER):
        return False
    import torch

    return torch.cuda.is_available()


def wants_cuda(cfg: DistConfig) -> bool:
    """Whether ranks of this config train on GPUs (``dist.device`` cuda, or auto on a machine with CUDA)."""
    return cfg.device == "cuda" or (cfg.device == "auto" and cuda_available())


@dataclass(kw_only=True)
class TrainerConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    rng: RNGConfig = field(default_factory=RNGConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    ft: FaultToleranceConfig = field(default_factory=FaultToleranceConfig)
    straggler: StragglerDetectionConfig = field(default_factory=StragglerDetectionConfig)
    nvrx_straggler: NVRxStragglerDetectionConfig = field(default_factory=NVRxStragglerDetectionConfig)
    rerun_state_machine: RerunStateMachineConfig = field(default_factory=RerunStateMachineConfig)
    inprocess_restart: InProcessRestartConfig = field(default_factory=InProcessRestartConfig)
    fault_injection: FaultInjectionConfig = field(default_factory=FaultInjectionConfig)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Cross-field checks; each error says how to fix the value."""
        t, s, c = self.train, self.scheduler, self.checkpoint
        positive = {
            "train.train_iters": t.train_iters,
            "train.micro_batch_size": t.micro_batch_size,
            "model.num_layers": self.model.num_layers,
            "model.seq_length": self.model.seq_length,
            "logger.log_interval": self.logger.log_interval,
        }
        for key, value in positive.items():
            if value < 1:
                raise ConfigError(f"{key}: must be >= 1, got {value}")
        decay = s.lr_decay_iters if s.lr_decay_iters is not None else t.train_iters
        if s.lr_decay_style != "constant" and not s.lr_warmup_iters < decay:
            raise ConfigError(
                f"scheduler.lr_warmup_iters ({s.lr_warmup_iters}) must be < scheduler.lr_decay_iters "
                f"({decay}); lower the warm-up or raise lr_decay_iters"
            )
        if t.global_batch_size is not None and t.global_batch_size % t.micro_batch_size:
            raise ConfigError(
                f"train.global_batch_size ({t.global_batch_size}) must be a multiple of "
                f"train.micro_batch_size ({t.micro_batch_size})"
            )
        if c.save_interval is not None and c.save_interval < 1:
            raise ConfigError(f"checkpoint.save_interval: must be >= 1, got {c.save_interval}")
        if c.save_interval is not None and c.save is None:
            raise ConfigError("checkpoint.save_interval is set but checkpoint.save is not: name a folder")
        if self.model.seq_length + 1 > self.dataset.corpus_bytes:
            raise ConfigError("dataset.corpus_bytes must exceed model.seq_length")
        if self.ft.simulate_fault and self.ft.simulated_fault_base_delay < 0:
            raise ConfigError("ft.simulated_fault_base_delay: must be >= 0")
        self._validate_local_checkpoints()
        self._validate_stragglers()

    def _validate_local_checkpoints(self) -> None:
        c = self.checkpoint
        if not c.local:
            return
        for key in ("save", "non_persistent_local_ckpt_dir", "non_persistent_save_interval"):
            if getattr(c, key) is None:
                raise ConfigError(f"checkpoint.non_persistent_ckpt_type is local but checkpoint.{key} is not set")

    def _validate_stragglers(self) -> None:
        if not self.straggler.log_straggler:
            return
        if self.nvrx_straggler.enabled:
            raise ConfigError(
                f"straggler.log_straggler with nvrx_straggler.enabled: the resiliency card's pitfall: "
                f"{pitfalls.CARD[pitfalls.TWO_STRAGGLER_DETECTORS]}",
                pitfall=pitfalls.TWO_STRAGGLER_DETECTORS,
            )
        raise ConfigError("straggler.log_straggler: Megatron's legacy straggler detector is not implemented here; "
                          "use nvrx_straggler.enabled")

    def digest(self) -> str:
        """A short hash of every setting that changes the numbers a run computes."""
        d = dataclasses.asdict(self)
        for volatile in ("logger", "fault_injection", "ft", "dist", "inprocess_restart"):
            d.pop(volatile)
        d["checkpoint"] = {"save_interval": self.checkpoint.save_interval}
        d["dataset"].pop("num_workers")  # the same batches with or without worker processes
        blob = json.dumps(d, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]
