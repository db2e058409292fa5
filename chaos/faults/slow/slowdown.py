"""The slow_rank fault: from the moment it is armed, this rank computes slower than its peers.

A straggler must be slow where a detector looks. On CPU the rank's forward pass is stretched (NVRx's report
math is fed forward timings there, trainer/resiliency/straggler.py): ``factor`` makes each forward pass
take ``factor`` times as long, ``seconds`` adds that much per step (spread over its micro-batches). On GPU
NVRx scores the same kernels on every rank, so a sleep between kernels would not show: a competing stream
on the same device runs matmuls back to back, and the rank's own kernels get slower.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import torch

CONTENTION_SIZE = 8192
"""Side of the square matmuls the competing stream runs on GPU (big enough to keep every SM busy)."""


@dataclass(frozen=True)
class Slowdown:
    """How much slower: exactly one of ``factor`` (> 1) or ``seconds`` (> 0 per step)."""

    factor: float | None = None
    seconds: float | None = None

    def extra_s(self, compute_s: float, microbatches: int) -> float:
        """Seconds to add after a forward pass that took ``compute_s``."""
        if self.factor is not None:
            return (self.factor - 1.0) * compute_s
        return (self.seconds or 0.0) / microbatches


class ForwardStretch:
    """Sleeps at the end of each forward pass (the trainer's forward span: ``start`` before, ``stop`` after)."""

    def __init__(self, slowdown: Slowdown, microbatches: int):
        self.slowdown, self.microbatches = slowdown, microbatches
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def stop(self) -> None:
        time.sleep(self.slowdown.extra_s(time.perf_counter() - self._t0, self.microbatches))

    def close(self) -> None: ...


class GpuContention:
    """A daemon thread that keeps a second CUDA stream on ``device`` busy with matmuls until closed."""

    def __init__(self, device: torch.device):
        self.device = device
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-gpu-contention", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # The current device is per thread and starts at cuda:0: without this the contention lands on
        # rank 0's GPU (seen on 2xH200: rank 0 slowed, rank 1 not).
        torch.cuda.set_device(self.device)
        stream = torch.cuda.Stream(device=self.device)
        with torch.cuda.stream(stream):
            # torch.full, not randn: drawing would move the device's RNG, which the training run owns.
            a = torch.full((CONTENTION_SIZE, CONTENTION_SIZE), 0.5, device=self.device, dtype=torch.bfloat16)
            while not self._stop.is_set():
                a = torch.tanh(a @ a)
                stream.synchronize()

    def start(self) -> None: ...
    def stop(self) -> None: ...

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def slow_down(device: torch.device, slowdown: Slowdown, microbatches: int) -> ForwardStretch | GpuContention:
    """Arm the slowdown for this rank: kernel contention on GPU, stretched forward passes on CPU."""
    if device.type == "cuda" and torch.cuda.is_available():
        return GpuContention(device)
    return ForwardStretch(slowdown, microbatches)
