"""A deterministic synthetic corpus and a stateless, resumable sampler.

The corpus is English-like text from faker (seeded), byte-tokenized. A sample is a window of
seq_length+1 bytes whose offset is drawn from (seed, global sample index) alone, so the batch of any
(seed, step, rank) is the same whenever and wherever it is computed; the sampler's only state is the
number of samples consumed, which goes into the checkpoint (as Megatron's consumed_samples).

With ``dataset.num_workers`` > 0 the same batches come from a torch DataLoader's worker processes
(:class:`WorkerBatches`), as Megatron Bridge's loaders serve them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.utils.data


def build_corpus(seed: int, n_bytes: int) -> np.ndarray:
    """`n_bytes` of seeded faker text as uint8 tokens (byte-level tokenizer: vocabulary 256)."""
    from faker import Faker

    fake = Faker("en_US")
    fake.seed_instance(seed)
    chunks: list[bytes] = []
    size = 0
    while size < n_bytes:
        text = (fake.paragraph(nb_sentences=8) + "\n").encode("utf-8")
        chunks.append(text)
        size += len(text)
    return np.frombuffer(b"".join(chunks)[:n_bytes], dtype=np.uint8).copy()


@dataclass
class Sampler:
    """Serves this data-parallel rank's micro-batches; the batch depends only on (seed, samples, rank)."""

    corpus: np.ndarray
    seed: int
    seq_length: int
    micro_batch_size: int
    global_batch_size: int
    dp_rank: int
    dp_size: int
    consumed_samples: int = 0

    @property
    def num_microbatches(self) -> int:
        return self.global_batch_size // (self.micro_batch_size * self.dp_size)

    def batch(self, microbatch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and next-token targets of one micro-batch of the current global batch."""
        first = (
            self.consumed_samples
            + microbatch * self.micro_batch_size * self.dp_size
            + self.dp_rank * self.micro_batch_size
        )
        rows = [self._sample(first + i) for i in range(self.micro_batch_size)]
        tokens = torch.from_numpy(np.stack(rows).astype(np.int64))
        return tokens[:, :-1], tokens[:, 1:]

    def advance(self) -> None:
        """Mark the current global batch as consumed (called once per completed step)."""
        self.consumed_samples += self.global_batch_size

    def _sample(self, index: int) -> np.ndarray:
        window = self.seq_length + 1
        offset = int(np.random.default_rng([self.seed, index]).integers(0, len(self.corpus) - window + 1))
        return self.corpus[offset : offset + window]

    def state_dict(self) -> dict[str, int]:
        return {"consumed_samples": self.consumed_samples}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.consumed_samples = int(state["consumed_samples"])


class _StepBatches(torch.utils.data.Dataset):
    """Item k: this rank's micro-batches of global batch k, computed by the Sampler's own arithmetic."""

    def __init__(self, sampler: Sampler):
        self.sampler = replace(sampler)

    def __getitem__(self, k: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        at = replace(self.sampler, consumed_samples=k * self.sampler.global_batch_size)
        return [at.batch(micro) for micro in range(at.num_microbatches)]


class _From(torch.utils.data.Sampler):
    """Global batch indices from `start` on, without end (the loop stops at train_iters)."""

    def __init__(self, start: int):
        self.start = start

    def __iter__(self) -> Iterator[int]:
        return itertools.count(self.start)


class WorkerBatches:
    """The Sampler's batches, served by a torch DataLoader's worker processes (``dataset.num_workers``).

    The workers compute exactly what :meth:`Sampler.batch` computes (same seed, same indices), so a run with
    workers is bit-identical to one without; the Sampler stays the state (consumed_samples) that checkpoints
    and reruns restore. The current global batch is kept until the Sampler moves on, so a rerun in place
    (the data position rewound to the step's start) gets the same batch again. ``start`` forks the workers
    (after the resume, so they begin at the resumed position); ``close`` stops them.
    """

    def __init__(self, sampler: Sampler, num_workers: int, worker_init_fn: Callable[[int], None] | None):
        self.sampler, self.num_workers, self.worker_init_fn = sampler, num_workers, worker_init_fn
        self._it: Iterator[list[tuple[torch.Tensor, torch.Tensor]]] | None = None
        self._next = -1
        self._current: tuple[int, list[tuple[torch.Tensor, torch.Tensor]]] | None = None

    @property
    def index(self) -> int:
        return self.sampler.consumed_samples // self.sampler.global_batch_size

    def start(self) -> None:
        self.close()
        loader = torch.utils.data.DataLoader(
            _StepBatches(self.sampler), batch_size=None, sampler=_From(self.index), num_workers=self.num_workers,
            worker_init_fn=self.worker_init_fn,
        )
        self._it, self._next = iter(loader), self.index

    def batch(self, microbatch: int) -> tuple[torch.Tensor, torch.Tensor]:
        k = self.index
        if self._current is None or self._current[0] != k:
            if self._it is None or self._next != k:
                self.start()
            self._current, self._next = (k, next(self._it)), k + 1
        return self._current[1][microbatch]

    def close(self) -> None:
        """Stop the workers (the iterator's shutdown joins them, and terminates any that do not exit)."""
        it, self._it, self._current = self._it, None, None
        if it is not None:
            it._shutdown_workers()  # what its __del__ does, now rather than whenever it is collected
