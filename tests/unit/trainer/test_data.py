"""The synthetic corpus and the sampler: deterministic, sharded by data-parallel rank, resumable."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.data import Sampler, build_corpus

SEQ = 16
FAST = settings(max_examples=30, deadline=None)


@functools.cache
def corpus(seed: int = 7, n_bytes: int = 4096) -> np.ndarray:
    return build_corpus(seed, n_bytes)


def sampler(rank: int = 0, dp: int = 1, consumed: int = 0, mbs: int = 2, gbs: int | None = None) -> Sampler:
    gbs = gbs or mbs * dp
    return Sampler(corpus(), 7, SEQ, mbs, gbs, rank, dp, consumed_samples=consumed)


def indices(s: Sampler, microbatch: int = 0) -> list[int]:
    """The global sample indices one micro-batch is drawn from (the sampler's only input besides the seed)."""
    seen: list[int] = []
    draw = s._sample
    s._sample = lambda index: (seen.append(index), draw(index))[1]  # type: ignore[method-assign]
    s.batch(microbatch)
    del s._sample
    return seen


def rows(s: Sampler, microbatch: int = 0) -> list[bytes]:
    """The samples of one micro-batch, each as bytes (inputs plus the last target)."""
    x, y = s.batch(microbatch)
    return [bytes(torch.cat([xi, yi[-1:]]).tolist()) for xi, yi in zip(x, y, strict=True)]


def test_corpus_is_deterministic_per_seed_and_differs_across_seeds():
    a, b = build_corpus(3, 2000), build_corpus(3, 2000)
    assert a.dtype == np.uint8 and a.shape == (2000,)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, build_corpus(4, 2000))
    assert np.count_nonzero(a == ord(" ")) > 200, "English-like text, not noise: many spaces"


def test_batch_shapes_and_next_token_targets():
    x, y = sampler(mbs=3).batch(0)
    assert x.shape == y.shape == (3, SEQ)
    assert x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1]), "targets are the inputs shifted by one token"
    assert int(x.max()) < 256 and int(x.min()) >= 0


@FAST
@given(consumed=st.integers(0, 10_000), dp=st.integers(1, 4), data=st.data())
def test_same_seed_samples_and_rank_give_the_same_batch_in_a_fresh_sampler(consumed, dp, data):
    rank = data.draw(st.integers(0, dp - 1))
    a = sampler(rank, dp, consumed).batch(0)
    b = sampler(rank, dp, consumed).batch(0)
    assert all(torch.equal(u, v) for u, v in zip(a, b, strict=True))


@FAST
@given(consumed=st.integers(0, 10_000), dp=st.integers(2, 4), mbs=st.integers(1, 3))
def test_dp_ranks_get_disjoint_shards_of_the_same_global_batch(consumed, dp, mbs):
    shards = [indices(sampler(r, dp, consumed, mbs)) for r in range(dp)]
    flat = [i for shard in shards for i in shard]
    # Offsets are drawn with replacement, so two samples may hold the same text; their indices never repeat.
    assert flat == list(range(consumed, consumed + dp * mbs)), "each rank its own slice of the step's samples"
    # The global batch does not depend on how it is sharded: one rank with all of it sees the same rows.
    assert [row for r in range(dp) for row in rows(sampler(r, dp, consumed, mbs))] == rows(sampler(0, 1, consumed, mbs * dp))


def test_dp_ranks_see_different_text_in_one_step():
    batches = [rows(sampler(rank, 4, consumed=40)) for rank in range(4)]
    assert len({tuple(b) for b in batches}) == 4


def test_microbatches_of_one_step_do_not_overlap():
    s = sampler(rank=1, dp=2, mbs=2, gbs=12)
    assert s.num_microbatches == 3
    seen = [i for m in range(3) for i in indices(s, m)]
    assert len(set(seen)) == 6


def test_advance_moves_to_a_new_global_batch():
    s = sampler(dp=2, rank=0)
    first = rows(s)
    s.advance()
    assert s.consumed_samples == 4
    assert rows(s) != first


@pytest.mark.parametrize("stop_after", [0, 1, 3])
def test_saved_sampler_state_continues_the_sequence(stop_after):
    reference = sampler(rank=1, dp=2)
    expected = []
    for _ in range(5):
        expected.append(rows(reference))
        reference.advance()

    before = sampler(rank=1, dp=2)
    for _ in range(stop_after):
        before.advance()
    state = before.state_dict()
    assert state == {"consumed_samples": stop_after * 4}

    after = sampler(rank=1, dp=2)
    after.load_state_dict(state)
    got = []
    for _ in range(5 - stop_after):
        got.append(rows(after))
        after.advance()
    assert got == expected[stop_after:]
