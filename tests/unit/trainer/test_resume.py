"""Resume exactness, the core property: stop after a checkpoint, auto-resume, and nothing differs.

An uninterrupted run of N steps (no checkpoints at all) and a run stopped by `train.exit_interval=k`
right after its checkpoint at k, then auto-resumed (checkpoint.load unset), must log bit-identical
losses for steps k+1..N and end with bit-identical weights.
"""

from __future__ import annotations

import pytest
import torch

N, K = 8, 4


@pytest.mark.parametrize("world_size", [1, 2])
def test_stop_and_auto_resume_is_bit_identical(launch, tmp_path, world_size):
    ckpt = tmp_path / "ckpt"
    uninterrupted = launch.train([f"train.train_iters={N}"], world_size, name="uninterrupted")
    stopped = launch.train(
        [f"train.train_iters={N}", f"train.exit_interval={K}", f"checkpoint.save_interval={K}", f"checkpoint.save={ckpt}"],
        world_size, name="stopped",
    )
    resumed = launch.train(
        [f"train.train_iters={N}", f"checkpoint.save_interval={K}", f"checkpoint.save={ckpt}"],
        world_size, name="resumed",
    )

    # The stop: after step K's checkpoint, with no final weights (the run is not finished).
    assert list(stopped.losses()) == list(range(1, K + 1))
    assert [(e["reason"], e["iteration"]) for e in stopped.events("exit")] == [("exit_interval", K)]
    assert not (stopped.run_dir / "final_weights.pt").exists()

    # The resume: automatic, announced in the event log and as a WARNING line.
    for rank in range(world_size):
        (resume,) = resumed.events("resume", rank=rank)
        assert (resume["iteration"], resume["auto"]) == (K, True)
    warnings = [line for line in resumed.log(0).splitlines() if "AUTO-RESUME" in line]
    assert len(warnings) == 1 and "[WARNING]" in warnings[0], resumed.log(0)
    for rank in range(1, world_size):
        assert "AUTO-RESUME" not in resumed.log(rank), "rank 0 alone announces it"

    # Exactness: the same losses, step by step, bit for bit (floats from JSON compare exactly) ...
    expected = {i: loss for i, loss in uninterrupted.losses().items() if i > K}
    assert list(expected) == list(range(K + 1, N + 1))
    assert resumed.losses() == expected
    assert stopped.losses() == {i: loss for i, loss in uninterrupted.losses().items() if i <= K}
    # ... the same data position, and the same final weights.
    consumed = [e["consumed_samples"] for e in resumed.events("step")]
    assert consumed == [e["consumed_samples"] for e in uninterrupted.events("step")][K:]
    digest = (uninterrupted.run_dir / "final_weights.sha256").read_text()
    assert (resumed.run_dir / "final_weights.sha256").read_text() == digest
    a = torch.load(uninterrupted.run_dir / "final_weights.pt", weights_only=True)
    b = torch.load(resumed.run_dir / "final_weights.pt", weights_only=True)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    (done,) = resumed.events("exit")
    assert (done["reason"], done["iteration"], done["weights_digest"]) == ("completed", N, digest.strip())
