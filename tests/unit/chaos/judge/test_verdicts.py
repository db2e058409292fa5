"""Verdicts: each expectation passes and fails with expected and observed in its message; baseline checks."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch

from chaos.judge.timeline import Metrics
from chaos.judge.verdicts import BaselineCheck, compare_runs, harness_verdicts, judge
from chaos.schema.expect import Expect
from runlog.log import EventLog

RECOVERED = Metrics(
    exit_code=0, restarts=1, completed_steps=12, wall_s=10.0, goodput=0.5, losses={}, checkpoints_saved=(5, 10),
    checkpoints_corrupt=(), attempt_starts=(0.5, 4.0), fault_mono=2.0, fault_attempt=0, fault_rank=1,
    detect_mono=3.0, detected_by="worker_failed", time_to_detect_s=1.0, recover_mono=6.0, time_to_recover_s=4.0,
    resumed_from_step=5, lost_steps=1,
)
EVERYTHING = Expect.model_validate({
    "exit_code": 0, "restarts": 1, "resumed_from_step": 5, "completed_steps": 12, "lost_steps": {"max": 2},
    "time_to_detect_s": {"max": 8}, "time_to_recover_s": {"max": 30}, "goodput": {"min": 0.3}, "baseline": "exact",
})
SAME = BaselineCheck(passed=True, message="losses agree (exact) on 12 steps, max abs diff 0; weights agree")


def test_a_recovered_run_passes_every_expectation():
    verdicts = judge(EVERYTHING, RECOVERED, SAME)
    assert [v.name for v in verdicts] == [
        "exit_code", "restarts", "resumed_from_step", "completed_steps", "lost_steps",
        "time_to_detect_s", "time_to_recover_s", "goodput", "baseline",
    ]
    assert all(v.passed for v in verdicts), [v.message() for v in verdicts if not v.passed]


def test_a_fault_that_found_no_target_fails_the_run(event):
    missed = event("fault_missed", 1.0, rank=-1, fault="sigkill", fault_id="f0", reason="no process of rank 1 within 60 s")
    verdicts = {v.name: v for v in harness_verdicts([missed], deadline_s=60)}
    assert not verdicts["faults_found_targets"].passed
    assert verdicts["faults_found_targets"].observed == "f0 sigkill: no process of rank 1 within 60 s"
    assert {v.name: v for v in harness_verdicts([], deadline_s=60)}["faults_found_targets"].passed


def test_only_set_expectations_are_judged():
    assert [v.name for v in judge(Expect(exit_code=0), RECOVERED)] == ["exit_code"]
    assert judge(Expect.model_validate({"exit_code": None}), RECOVERED) == []


def test_a_scenario_that_states_nothing_of_the_exit_expects_a_clean_one():
    """No exit_code and no trainer_exit_codes: the default expectation is exit_code 0 (a job that failed
    never passes for want of an expectation); exit_code: null opts out."""
    (verdict,) = judge(Expect(), dataclasses.replace(RECOVERED, exit_code=1))
    assert not verdict.passed and verdict.message() == "exit_code: expected == 0, observed 1"
    assert verdict.bounds == {"min": 0, "max": 0}
    assert judge(Expect(trainer_exit_codes=[16]), RECOVERED)[0].name == "trainer_exit_codes"
    assert [v.name for v in judge(Expect(completed_steps=12), RECOVERED)] == ["exit_code", "completed_steps"]


@pytest.mark.parametrize(
    ("field", "observed", "message"),
    [
        ("exit_code", 1, "exit_code: expected == 0, observed 1"),
        ("restarts", 2, "restarts: expected == 1, observed 2"),
        ("resumed_from_step", 0, "resumed_from_step: expected == 5, observed 0"),
        ("completed_steps", 10, "completed_steps: expected == 12, observed 10"),
        ("lost_steps", 3, "lost_steps: expected <= 2, observed 3"),
        ("time_to_detect_s", 9.25, "time_to_detect_s: expected <= 8, observed 9.25"),
        ("time_to_recover_s", 31.0, "time_to_recover_s: expected <= 30, observed 31"),
        ("goodput", 0.12345, "goodput: expected >= 0.3, observed 0.1235"),
        ("lost_steps", None, "lost_steps: expected <= 2, observed not observed"),
        ("time_to_detect_s", None, "time_to_detect_s: expected <= 8, observed not observed"),
    ],
)
def test_each_expectation_fails_with_expected_and_observed(field, observed, message):
    verdicts = {v.name: v for v in judge(EVERYTHING, dataclasses.replace(RECOVERED, **{field: observed}), SAME)}
    assert not verdicts[field].passed
    assert verdicts[field].message() == message
    assert all(v.passed for name, v in verdicts.items() if name != field)


def test_baseline_verdicts():
    exact = Expect(baseline="exact", exit_code=None)
    missing = judge(exact, RECOVERED, None)[0]
    assert not missing.passed
    assert missing.message() == "baseline: expected bit-identical losses and weights to the baseline, observed not observed"
    differ = BaselineCheck(passed=False, message="losses diverge (exact) at iteration 7: 1.0 vs 1.5")
    assert judge(exact, RECOVERED, differ)[0].message().endswith("observed losses diverge (exact) at iteration 7: 1.0 vs 1.5")
    tolerant = judge(Expect.model_validate({"baseline": {"tolerance": 0.01}, "exit_code": None}), RECOVERED, SAME)[0]
    assert tolerant.passed and tolerant.expected == "losses and weights within 0.01 of the baseline"


def make_run(folder, losses: dict[int, float], weights: dict[str, torch.Tensor] | None):
    log = EventLog(folder, "rank-0", rank=0, attempt=0)
    for i, value in losses.items():
        log.emit("step", iteration=i, loss=value, lr=1e-3, step_time=0.01, consumed_samples=i)
    log.close()
    if weights is not None:
        torch.save(weights, folder / "final_weights.pt")
    return folder


LOSSES = {i: 3.0 + 1.0 / i for i in range(1, 9)}
WEIGHTS = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.ones(3)}


@pytest.fixture
def baseline(tmp_path):
    return make_run(tmp_path / "baseline", LOSSES, WEIGHTS)


def test_identical_runs_compare_exact(tmp_path, baseline):
    run = make_run(tmp_path / "run", LOSSES, {k: v.clone() for k, v in WEIGHTS.items()})
    check = compare_runs(run, baseline, "exact")
    assert check.passed, check.message
    assert check.max_weight_diff == 0.0 and check.first_divergence is None


def test_weights_within_tolerance_pass_only_with_a_tolerance(tmp_path, baseline):
    run = make_run(tmp_path / "run", LOSSES, {"w": WEIGHTS["w"] + 1e-3, "b": WEIGHTS["b"]})
    exact = compare_runs(run, baseline, "exact")
    assert not exact.passed
    assert exact.max_weight_diff == pytest.approx(1e-3, rel=1e-3)
    assert "weights differ, max abs diff 0.001 in 'w'" in exact.message
    assert compare_runs(run, baseline, 1e-2).passed


def test_diverging_losses_name_the_first_iteration(tmp_path, baseline):
    run = make_run(tmp_path / "run", {i: v + (0.5 if i >= 4 else 0.0) for i, v in LOSSES.items()}, WEIGHTS)
    check = compare_runs(run, baseline, 1e-3)
    assert not check.passed
    assert (check.first_divergence, check.loss_run, check.loss_baseline) == (4, LOSSES[4] + 0.5, LOSSES[4])
    assert "at iteration 4" in check.message


def test_missing_steps_or_weights_fail(tmp_path, baseline):
    short = make_run(tmp_path / "short", {i: LOSSES[i] for i in range(1, 7)}, WEIGHTS)
    check = compare_runs(short, baseline, "exact")
    assert not check.passed and "2 only in b" in check.message
    bare = make_run(tmp_path / "bare", LOSSES, None)
    check = compare_runs(bare, baseline, "exact")
    assert not check.passed and "no final weights at" in check.message


def test_damaged_weights_fail_the_comparison_by_name(tmp_path, baseline):
    """torch's unpickler raises KeyError (or EOFError, ...) on a damaged file: a failed check, no traceback."""
    damaged = make_run(tmp_path / "damaged", LOSSES, WEIGHTS)
    (damaged / "final_weights.pt").write_bytes(b"junk\n")
    check = compare_runs(damaged, baseline, "exact")
    assert not check.passed and f"final weights {damaged / 'final_weights.pt'} cannot be read (" in check.message


def test_verdicts_import_without_torch():
    code = "import sys; sys.modules['torch'] = None; import chaos.judge.verdicts, chaos.judge.report, chaos.judge.correlate"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_known_failure_holds_only_for_exactly_its_verdicts_and_its_signature():
    from chaos.judge.verdicts import Verdict, known_failure_verdict
    from chaos.schema.expect import KnownFailure

    known = KnownFailure(reason="Megatron-Core bug", verdicts=["exit_code", "completed_steps"], signature="assert len(steps) == 1")
    failing = [Verdict("exit_code", "== 0", 1, False), Verdict("completed_steps", "== 30", 15, False), Verdict("restarts", "== 1", 1, True)]
    output = "AssertionError\n    assert len(steps) == 1\n"
    held = known_failure_verdict(known, failing, output)
    assert held.passed and held.observed == "failed: completed_steps, exit_code"
    assert held.expected == ("exactly completed_steps, exit_code fail, the output shows 'assert len(steps) == 1' "
                             "(Megatron-Core bug)")
    assert not known_failure_verdict(known, failing, "another error").passed
    fixed = [dataclasses.replace(v, passed=True) for v in failing]
    assert known_failure_verdict(known, fixed, output).observed == "failed: none"
    worse = [*failing, Verdict("processes_reaped", "none", [7], False)]
    assert not known_failure_verdict(known, worse, output).passed


def test_a_known_failure_s_may_also_fail_verdicts_pass_or_fail_and_no_other_does():
    from chaos.judge.verdicts import Verdict, known_failure_verdict
    from chaos.schema.expect import KnownFailure

    known = KnownFailure(reason="a cascade", verdicts=["exit_code"], may_also_fail=["time_to_recover_s"])
    edge = Verdict("time_to_recover_s", "<= 11.7", 11.98, False)
    assert known_failure_verdict(known, [Verdict("exit_code", "== 0", 1, False), edge], "").passed
    assert known_failure_verdict(known, [Verdict("exit_code", "== 0", 1, False), dataclasses.replace(edge, passed=True)], "").passed
    assert not known_failure_verdict(known, [edge], "").passed
    assert "(and maybe time_to_recover_s)" in known_failure_verdict(known, [edge], "").expected
