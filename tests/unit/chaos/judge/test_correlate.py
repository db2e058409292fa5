"""The loss correlation's judging: tolerances, missing steps, step ranges, sources and their errors."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos.adapters.tensorboard import TensorBoardError, read_scalars
from chaos.judge.correlate import (
    BF16,
    BF16_RTOL,
    EXACT,
    MEGATRON_CI,
    CorrelateError,
    StepRange,
    Tolerance,
    correlate,
    read_curve,
    tolerance_of,
)
from runlog.log import EventLog

DATA = Path(__file__).resolve().parents[3] / "data" / "megatron"
LOSSES = {i: 2.0 + 4.0 / (i + 2) for i in range(1, 13)}
finite = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6)


def run_folder(path: Path, losses: dict[int, float]) -> Path:
    log = EventLog(path, "rank-0", rank=0, attempt=0)
    for i, value in losses.items():
        log.emit("step", iteration=i, loss=value, lr=1e-3, step_time=0.01, consumed_samples=8 * i)
    log.close()
    return path


def test_exact_is_the_same_bits():
    assert EXACT.agree(1.5, 1.5) and EXACT.agree(math.nan, math.nan) and EXACT.agree(math.inf, math.inf)
    assert not EXACT.agree(0.0, -0.0), "equal numbers, different bits"
    assert not EXACT.agree(1.0, 1.0 + 2**-52)


@given(finite, finite, st.floats(0, 1), st.floats(0, 10))
def test_tolerances_agree_as_numpy_isclose(a, b, rtol, atol):
    tol = Tolerance.custom(rtol, atol)
    assert tol.agree(a, b) == bool(np.isclose(a, b, rtol=rtol, atol=atol))


def test_bf16_accepts_neighbouring_bf16_numbers_at_every_magnitude_and_not_two_units_apart():
    assert BF16_RTOL == 2.0**-7 and BF16.rtol == BF16_RTOL and BF16.atol == 0.0
    for e in range(-12, 13):
        unit = 2.0 ** (e - 7)  # a bf16 number m * unit, 128 <= m <= 255, lies in [2**e, 2**(e + 1))
        for m in (128, 129, 200, 254, 255):
            x = m * unit
            assert BF16.agree(x + unit, x) and BF16.agree(x, x + unit), (m, e)
            assert not BF16.agree(x + 2 * unit, x), (m, e)
    assert not BF16.agree(math.nan, 10.0) and not BF16.agree(math.inf, 10.0)


def test_megatron_ci_is_megatron_lm_golden_value_tolerance_for_lm_loss():
    assert MEGATRON_CI.rtol == 0.05 and MEGATRON_CI.atol == 0.0 and not MEGATRON_CI.same_bits
    assert MEGATRON_CI.agree(10.0 * 1.0499, 10.0) and not MEGATRON_CI.agree(10.0 * 1.0501, 10.0)
    assert not MEGATRON_CI.agree(math.nan, 10.0)


def test_a_tolerance_is_a_preset_or_numbers_never_both():
    assert tolerance_of(None, None, None) is EXACT and tolerance_of("bf16", None, None) is BF16
    assert tolerance_of("megatron-ci", None, None) is MEGATRON_CI
    assert tolerance_of(None, 1e-3, None) == Tolerance.custom(1e-3, 0.0)
    with pytest.raises(CorrelateError, match="'fp8' is not a preset"):
        tolerance_of("fp8", None, None)
    with pytest.raises(CorrelateError, match="not both"):
        tolerance_of("bf16", 1e-3, None)
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(CorrelateError, match="--rtol: .* must be a finite number >= 0"):
            tolerance_of(None, bad, None)


def test_step_ranges():
    assert StepRange.parse("1-10") == StepRange(1, 10) and StepRange.parse("3-") == StepRange(3, None)
    assert StepRange.parse("-5") == StepRange(None, 5) and StepRange.parse("7") == StepRange(7, 7)
    assert 3 in StepRange(3, None) and 2 not in StepRange(3, None) and 11 not in StepRange(1, 10)
    assert [str(StepRange.parse(t)) for t in ("1-10", "3-", "-5", "7")] == ["1-10", "3-", "-5", "7"]
    for bad in ("", "-", "a", "5-3", "1-2-3", "1,2"):
        with pytest.raises(CorrelateError, match="--steps"):
            StepRange.parse(bad)


def test_identical_curves_agree():
    result = correlate(LOSSES, dict(LOSSES), EXACT)
    assert result.passed and result.compared == 12 and result.max_abs_diff == 0.0
    assert result.summary() == "losses agree (exact) on 12 steps, max abs diff 0"


def test_the_first_divergent_step_is_named_with_both_values():
    diverged = {i: v + (0.25 if i >= 5 else 0.0) for i, v in LOSSES.items()}
    result = correlate(LOSSES, diverged, Tolerance.absolute(1e-3))
    assert not result.passed
    assert (result.first_divergence, result.value_a, result.value_b) == (5, LOSSES[5], diverged[5])
    assert result.max_abs_diff == pytest.approx(0.25)
    assert result.summary().startswith(f"losses diverge (abs 0.001) at iteration 5: {LOSSES[5]!r} vs {diverged[5]!r}")


def test_a_run_that_stopped_early_diverges_at_its_first_missing_step():
    crashed = {i: LOSSES[i] for i in range(1, 5)}
    result = correlate(LOSSES, crashed, EXACT)
    assert not result.passed and result.first_divergence == 5 and result.divergence.missing == "b"
    assert (result.compared, result.only_in("a"), result.only_in("b")) == (4, 8, 0)
    assert "at iteration 5: " in result.summary() and "vs missing" in result.summary()
    assert "8 steps only in a, 0 only in b" in result.summary()


def test_a_named_range_judges_only_its_steps_and_still_its_missing_ones():
    crashed = {i: LOSSES[i] for i in range(1, 5)}
    assert correlate(LOSSES, crashed, EXACT, StepRange(1, 4)).passed
    resumed = {i: LOSSES[i] for i in range(3, 13)}
    assert correlate(LOSSES, resumed, EXACT, StepRange(3, None)).passed
    assert correlate(LOSSES, resumed, EXACT).first_divergence == 1
    assert correlate(LOSSES, crashed, EXACT, StepRange(3, None)).first_divergence == 5


def test_a_step_that_went_nan_diverges_from_a_finite_one():
    """Real: Megatron-LLM issue #33's log, whose iteration 3385 printed no lm loss, against the same steps
    with a finite loss at 3385."""
    nan_run = read_curve(DATA / "real/megatron_llm_nan_issue33.log").losses
    healthy = {**nan_run, 3385: 0.70}
    result = correlate(nan_run, healthy, BF16)
    assert result.first_divergence == 3385 and math.isnan(result.value_a) and result.divergence.abs_diff == math.inf
    assert correlate(nan_run, dict(nan_run), EXACT).passed, "NaN at the same step on both sides agrees"


def test_real_megatron_runs_of_two_versions_agree_to_bf16_until_step_3():
    """Real: Megatron-LM issue #1570, mcore 0.11 and 0.12 on one config."""
    old, new = (read_curve(DATA / f"real/mlm_core_0.{v}_issue1570.log").losses for v in (11, 12))
    result = correlate(old, new, BF16)
    assert result.first_divergence == 3 and [d.agree for d in result.diffs] == [True, True, False]
    assert correlate(old, new, EXACT).first_divergence == 1


def test_json_is_strict_json_with_non_finite_values_spelled_out():
    result = correlate({1: 1.0, 2: math.nan, 3: 3.0}, {1: 1.0, 2: 2.0}, EXACT)
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert data["passed"] is False and data["first_divergence"] == {"iteration": 2, "a": "nan", "b": 2.0, "missing": None}
    assert data["steps"][1]["abs_diff"] == "inf" and data["steps"][2]["missing"] == "b"
    assert data["tolerance"] == {"name": "exact", "rtol": 0.0, "atol": 0.0, "same_bits": True}


def test_the_table_has_a_row_per_step():
    rows = correlate({1: 1.0, 2: 2.0}, {1: 1.0, 2: 2.5, 3: 3.0}, EXACT).table().splitlines()
    assert rows[0].split() == ["step", "a", "b", "abs", "diff", "rel", "diff", "verdict"]
    assert rows[1].split() == ["1", "1.0", "1.0", "0", "0", "ok"]
    assert rows[2].split() == ["2", "2.0", "2.5", "0.5", "0.2", "DIVERGE"]
    assert rows[3].split() == ["3", "missing", "3.0", "missing", "missing", "MISSING", "in", "a"]


def test_sources_are_read_by_kind(tmp_path):
    assert read_curve(run_folder(tmp_path / "run", LOSSES)).losses == LOSSES
    log = read_curve(DATA / "real/mlm_core_0.12_issue1570.log")
    assert log.kind == "megatron log" and log.losses == {1: 11.86396, 2: 11.86432, 3: 8.431922}


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: p / "nothing", "no such file or folder"),
    (lambda p: (p / "empty").mkdir() or p / "empty", "not a run folder (no events/) nor a TensorBoard folder"),
    (lambda p: (p / "notes.txt").write_text("no training here\n") and p / "notes.txt", "no loss in this log"),
    (lambda p: (p / "w.pt").write_bytes(bytes(range(256)) * 4) and p / "w.pt", "no loss in this log"),
])
def test_unreadable_sources_are_named(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(CorrelateError, match=re.escape(message)) as e:
        read_curve(path)
    assert str(path) in str(e.value)


def test_a_damaged_run_folder_is_bad_input(tmp_path):
    run = run_folder(tmp_path / "run", {1: 1.0})
    (run / "events" / "rank-1.jsonl").write_bytes(b'{"event": "step", "mono": 1.0, "\xff\xfe": 1}\n')
    with pytest.raises(CorrelateError, match="unreadable event log"):
        read_curve(run)
    stepless = run_folder(tmp_path / "stepless", {})
    EventLog(stepless, "rank-0", rank=0).emit("run_start")
    with pytest.raises(CorrelateError, match="no loss in this run folder"):
        read_curve(stepless)


def test_tensorboard_files_need_the_tensorboard_package(tmp_path, monkeypatch):
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(tmp_path / "tb")) as writer:
        writer.add_scalar("lm loss", 1.5, 1)
    monkeypatch.setitem(sys.modules, "tensorboard.backend.event_processing", None)
    with pytest.raises(CorrelateError, match=r"needs the tensorboard package: pip install 'chaos-harness\[tensorboard\]'"):
        read_curve(tmp_path / "tb")


def test_tensorboard_restarts_keep_the_final_lineage(tmp_path):
    """Real event files from torch's SummaryWriter, as Megatron writes them (tag 'lm loss', one file per
    launch): a second launch resumed at step 4 and recomputed 4-5."""
    from torch.utils.tensorboard import SummaryWriter

    for launch, steps in ((0, range(1, 7)), (1, range(4, 6))):
        with SummaryWriter(log_dir=str(tmp_path / "tb"), filename_suffix=f".{launch}") as writer:
            for i in steps:
                writer.add_scalar("lm loss", 10.0 - i + launch / 2, i)
                writer.add_scalar("lm loss vs samples", 10.0 - i, 32 * i)
    curve = read_curve(tmp_path / "tb")
    assert curve.kind == "tensorboard" and curve.losses == {1: 9.0, 2: 8.0, 3: 7.0, 4: 6.5, 5: 5.5}
    with pytest.raises(TensorBoardError, match=r"no 'mtp_1 loss' scalar .* \(scalars: 'lm loss', 'lm loss vs samples'\)"):
        read_scalars(tmp_path / "tb", "mtp_1 loss")


@given(st.dictionaries(st.integers(1, 10_000), st.floats(allow_nan=True, allow_infinity=True), min_size=1))
def test_a_curve_always_matches_itself_exactly(losses):
    result = correlate(losses, dict(losses), EXACT)
    assert result.passed and result.compared == len(losses) and result.max_abs_diff == 0.0
