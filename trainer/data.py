"""A deterministic synthetic corpus and a stateless, resumable sampler.

The corpus is English-like text from faker (seeded), byte-tokenized. A sample is a window of
seq_length+1 bytes whose offset is drawn from (seed, global sample index) alone, so the batch of any
(seed, step, rank) is the same whenever and wherever it is computed; the sampler's only state is the
number of samples consumed, which goes into the checkpoint (as Megatron's consumed_samples).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


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
