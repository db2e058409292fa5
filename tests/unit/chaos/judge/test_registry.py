"""The verdict registry: every expectation has its metric, judged the way its type says; every harness verdict
the schema knows is registered (chaos/judge/registry.py)."""

from __future__ import annotations

import dataclasses
import typing

from chaos.judge.registry import BASELINE, EXPECTATIONS, HARNESS_CHECKS, breaks_run
from chaos.judge.timeline import Metrics
from chaos.judge.verdicts import judge
from chaos.schema.expect import HARNESS_FIELDS, HARNESS_VERDICTS, Expect, Limit


def test_every_expectation_is_registered_with_a_metric_that_exists():
    expectations = set(Expect.model_fields) - set(HARNESS_FIELDS) - {BASELINE}
    assert expectations == set(EXPECTATIONS)
    metrics = {f.name for f in dataclasses.fields(Metrics)}
    assert {name: e.metric for name, e in EXPECTATIONS.items() if e.metric not in metrics} == {}


def test_a_limit_typed_expectation_is_judged_as_a_limit_and_any_other_by_equality():
    hints = typing.get_type_hints(Expect)
    for name, expectation in EXPECTATIONS.items():
        is_limit = Limit in typing.get_args(hints[name])
        assert expectation.judged == ("limit" if is_limit else "equal"), name


def test_every_harness_verdict_is_registered_and_only_the_integrity_ones_break_a_run():
    assert tuple(HARNESS_CHECKS) == HARNESS_VERDICTS
    assert {name for name in HARNESS_VERDICTS if breaks_run(name)} == {
        "processes_reaped", "faults_found_targets", "unexplained_failures",
    }
    assert not breaks_run("exit_code")


def test_each_expectation_reads_the_metric_the_registry_names():
    """Judged on a Metrics whose fields all differ, each verdict shows the value of its own metric."""
    metrics = Metrics(exit_code=3, restarts=4, completed_steps=5, wall_s=None, goodput=None, losses={},
                      checkpoints_saved=(), checkpoints_corrupt=(), attempt_starts=(), launches=6)
    expect = Expect.model_validate({"exit_code": 3, "restarts": {"max": 4}, "completed_steps": 5, "launches": 6})
    observed = {v.name: v.observed for v in judge(expect, metrics)}
    assert observed == {"exit_code": 3, "restarts": 4, "completed_steps": 5, "launches": 6}
    (missing,) = judge(Expect.model_validate({"trainer_exit_codes": [0], "exit_code": None}), metrics)
    assert (missing.name, missing.observed, missing.passed) == ("trainer_exit_codes", "not observed", False)
