"""The rerun state machine in real 2-rank gloo worlds (forked ranks): exit codes, checkpoint, node identity."""

from __future__ import annotations

import os
from pathlib import Path

from trainer.checkpoint import list_checkpoints

RERUN = ["rerun_state_machine.rerun_mode=validate_results", "train.train_iters=4"]


def on_node(node: str):
    def setup(rank: int) -> None:
        os.environ["CHAOS_NODE_ID"] = node

    return setup


def injected(kind: str) -> list[str]:
    # rate 1: every validated step is hit; the first step is never validated, so step 2 is.
    return [*RERUN, "rerun_state_machine.error_injection_rate=1", f"rerun_state_machine.error_injection_type={kind}"]


def test_a_transient_error_exits_17_on_every_rank_without_a_checkpoint(launch, tmp_path: Path) -> None:
    run = launch.start([*injected("transient_error"), f"checkpoint.save={tmp_path / 'ckpt'}"], world_size=2)
    assert run.wait(60) == [17, 17]
    for rank in (0, 1):
        (exit_event,) = run.events("exit", rank)
        assert (exit_event["code"], exit_event["diagnosis"], exit_event["iteration"]) == (17, "transient_error", 1)
    assert list_checkpoints(tmp_path / "ckpt") == []


def test_a_persistent_error_exits_16_then_17_when_resumed_on_another_node(launch, tmp_path: Path) -> None:
    args = [*injected("persistent_error"), f"checkpoint.save={tmp_path / 'ckpt'}"]
    first = launch.start(args, world_size=2, name="first", child_setup=on_node("node-a"))
    assert first.wait(60) == [16, 16]
    assert [i for i, _ in list_checkpoints(tmp_path / "ckpt")] == [1]
    same = launch.start(args, world_size=2, name="same", child_setup=on_node("node-a"))
    assert same.wait(60) == [16, 16]
    other = launch.start(args, world_size=2, name="other", child_setup=on_node("node-b"))
    assert other.wait(60) == [17, 17]
    assert [e["diagnosis"] for e in other.events("rerun")] == ["persistent_error"]
    assert other.events("rerun")[0]["state"] == "stopped"


def test_rerunning_every_step_changes_no_number(launch, tmp_path: Path) -> None:
    plain = launch.train(["train.train_iters=4"], world_size=2, name="plain", timeout=60)
    stats = launch.train(
        ["train.train_iters=4", "rerun_state_machine.rerun_mode=report_determinism_stats"],
        world_size=2, name="stats", timeout=60,
    )
    assert stats.losses() == plain.losses()
    spreads = [e["values"] for e in stats.events("rerun")]
    assert len(spreads) == 4 and all(v == [0.0, 0.0] for v in spreads)
