"""The loss-correlation test on Megatron-style logs, our trainer's lines and run folders."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos.judge.correlate import correlate, parse_log, read_losses
from runlog.log import EventLog

LOSSES = {i: 2.0 + 4.0 / (i + 2) for i in range(1, 13)}


def megatron_log(losses: dict[int, float], total: int = 12) -> str:
    lines = ["using world size: 2", " validation loss at iteration 10 | lm loss value: 1.0 | lm loss PPL: 2.7 |"]
    for i, value in losses.items():
        lines.append(
            f" [2026-01-01 10:00:00] iteration {i:8d}/{total:8d} | consumed samples: {8 * i} | "
            f"elapsed time per iteration (ms): 12.3 | learning rate: 1.000000E-03 | global batch size:     8 | "
            f"lm loss: {value:.6E} | loss scale: 1.0 | number of skipped iterations:   0 |"
        )
    return "\n".join(lines) + "\n"


def write(path, text: str):
    path.write_text(text)
    return path


def run_folder(path, losses: dict[int, float]):
    log = EventLog(path, "rank-0", rank=0, attempt=0)
    for i, value in losses.items():
        log.emit("step", iteration=i, loss=value, lr=1e-3, step_time=0.01, consumed_samples=8 * i)
    log.close()
    return path


def test_parse_megatron_and_our_lines():
    text = megatron_log({1: 5.4321, 2: 5.1}) + "iteration 3/12 | lm loss 5.00000 | lr 1.000E-03 | step time 12.3 ms\n"
    assert parse_log(text) == {1: 5.4321, 2: 5.1, 3: 5.0}


def test_parse_keeps_the_last_line_of_a_recomputed_step():
    text = "iteration 6/12 | lm loss 7.0 | lr 1\niteration 7/12 | lm loss nan | lr 1\niteration 6/12 | lm loss 7.5 | lr 1\n"
    losses = parse_log(text)
    assert losses[6] == 7.5 and math.isnan(losses[7])


def test_identical_megatron_logs_pass(tmp_path):
    a = read_losses(write(tmp_path / "a.log", megatron_log(LOSSES)))
    b = read_losses(write(tmp_path / "b.log", megatron_log(LOSSES)))
    result = correlate(a, b, "exact")
    assert result.passed and result.compared == 12 and result.max_abs_diff == 0.0
    assert result.summary() == "losses agree (exact) on 12 steps, max abs diff 0"


def test_divergence_at_step_5_is_reported(tmp_path):
    diverged = {i: v + (0.25 if i >= 5 else 0.0) for i, v in LOSSES.items()}
    a = read_losses(write(tmp_path / "a.log", megatron_log(LOSSES)))
    b = read_losses(write(tmp_path / "b.log", megatron_log(diverged)))
    result = correlate(a, b, 1e-3)
    assert not result.passed
    assert (result.first_divergence, result.value_a, result.value_b) == (5, a[5], b[5])
    assert result.max_abs_diff == pytest.approx(0.25)
    assert "diverge (abs 0.001) at iteration 5" in result.summary()


def test_bf16_tolerance_is_relative():
    a = {1: 4.0, 2: 0.5}
    within = {1: 4.0 * (1 + 0.005), 2: 0.5 * (1 - 0.005)}
    beyond = {1: 4.0, 2: 0.5 * (1 + 0.01)}
    assert correlate(a, within, "bf16").passed
    assert not correlate(a, within, "exact").passed
    result = correlate(a, beyond, "bf16")
    assert not result.passed and result.first_divergence == 2


def test_missing_steps_are_counted_not_judged():
    result = correlate(LOSSES, {i: LOSSES[i] for i in range(1, 10)} | {13: 1.0}, "exact")
    assert result.passed and result.compared == 9
    assert (result.only_in_a, result.only_in_b) == (3, 1)
    assert "3 steps only in a, 1 only in b" in result.summary()


def test_nothing_in_common_fails_clearly():
    result = correlate({1: 1.0}, {}, "exact")
    assert not result.passed and result.compared == 0
    assert result.summary() == "no common steps to compare (1 only in a, 0 only in b)"


def test_run_folders_against_a_megatron_log(tmp_path):
    run = read_losses(run_folder(tmp_path / "run", LOSSES))
    log = read_losses(write(tmp_path / "m.log", megatron_log(LOSSES)))
    assert run == LOSSES
    assert correlate(run, log, 1e-6).passed, "the log keeps 7 significant digits"
    assert not correlate(run, log, "exact").passed


def test_a_bad_tolerance_is_named():
    with pytest.raises(ValueError, match="'fp8' is not 'exact', 'bf16' or a number"):
        correlate(LOSSES, LOSSES, "fp8")
    with pytest.raises(ValueError, match=">= 0"):
        correlate(LOSSES, LOSSES, -1.0)


@given(st.dictionaries(st.integers(1, 10_000), st.floats(allow_nan=True, allow_infinity=True), min_size=1))
def test_a_curve_always_matches_itself_exactly(losses):
    result = correlate(losses, dict(losses), "exact")
    assert result.passed and result.compared == len(losses) and result.max_abs_diff == 0.0
