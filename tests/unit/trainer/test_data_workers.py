"""Data-loader workers (dataset.num_workers): the same batches as the workerless sampler, bit for bit,
also across a resume; the workers start after the resume, at the resumed position."""

from __future__ import annotations

import numpy as np
import torch

from trainer.data import Sampler, WorkerBatches

N, K = 8, 4


def test_workers_serve_the_samplers_batches():
    corpus = np.arange(4096, dtype=np.int64).astype(np.uint8)
    plain = Sampler(corpus, 3, 16, 2, 8, 1, 2, consumed_samples=8)
    served = WorkerBatches(Sampler(corpus, 3, 16, 2, 8, 1, 2, consumed_samples=8), 2, None)
    try:
        for _ in range(3):
            for micro in range(plain.num_microbatches):
                assert all(torch.equal(a, b) for a, b in zip(plain.batch(micro), served.batch(micro), strict=True))
            served.batch(0)  # the same step again (a rerun in place) comes from the kept batch
            plain.advance()
            served.sampler.advance()
        served.sampler.load_state_dict({"consumed_samples": 0})  # a rewind: the workers start over there
        plain.load_state_dict({"consumed_samples": 0})
        assert torch.equal(plain.batch(1)[0], served.batch(1)[0])
    finally:
        served.close()


def test_a_run_with_workers_is_bit_identical_to_one_without(launch, tmp_path):
    ckpt = tmp_path / "ckpt"
    plain = launch.train([f"train.train_iters={N}", "train.global_batch_size=8"], 2, name="plain")
    stopped = launch.train(
        [f"train.train_iters={N}", "train.global_batch_size=8", "dataset.num_workers=2", f"train.exit_interval={K}",
         f"checkpoint.save_interval={K}", f"checkpoint.save={ckpt}"], 2, name="stopped",
    )
    resumed = launch.train(
        [f"train.train_iters={N}", "train.global_batch_size=8", "dataset.num_workers=2", f"checkpoint.save_interval={K}",
         f"checkpoint.save={ckpt}"], 2, name="resumed",
    )
    assert {**stopped.losses(), **resumed.losses()} == plain.losses()
    assert (resumed.run_dir / "final_weights.sha256").read_text() == (plain.run_dir / "final_weights.sha256").read_text()
