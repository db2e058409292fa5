"""The pytest plugin as its users run it: pytest in a subprocess (pytester) on a folder of scenario files.

Options and their errors, selection, skips with their reasons, verdicts as JUnit properties, and a session
spread over xdist workers. The scenarios that really run are foreign one-rank commands (a Python line that
prints its steps), so a run takes seconds.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

COMMAND_SCENARIO = """\
schema_version: 1
name: {name}
description: a one-rank command that prints its steps
world_size: 1
launcher: torchrun
requires: {requires}
command: [python, -c, "print('step 1 loss 1.0'); print('step 2 loss 0.5')"]
step_pattern: '^step (?P<step>\\d+) loss (?P<loss>\\S+)'
expect: {{exit_code: 0, completed_steps: {steps}}}
"""

TESTS = """\
def test_scenario(scenario_file, run_scenario):
    outcome = run_scenario(scenario_file)
    assert outcome.passed, outcome.summary


def test_not_a_scenario():
    pass
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    (pytester.path / "scenarios").mkdir()
    for name, requires, steps in (("quick", "any", 2), ("wrong", "any", 3), ("gpu_only", "gpu", 2), ("cpu_only", "cpu", 2)):
        (pytester.path / "scenarios" / f"{name}.yaml").write_text(COMMAND_SCENARIO.format(name=name, requires=requires, steps=steps))
    pytester.makepyfile(test_catalogue=TESTS)
    return pytester


# Both are usage errors before collection (pytest_configure): pytest's own one line, exit 4, no traceback.
def test_an_unknown_scenario_is_an_error_naming_the_known_ones(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess("--scenario", "nope", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --scenario: unknown nope; known: cpu_only, gpu_only, quick, wrong"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_scenario_dir_that_is_not_a_folder_is_an_error(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess("--scenario-dir", "missing", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --scenario-dir: missing is not a folder"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_one_test_per_scenario_file_and_selection_keeps_only_the_named_ones(project: pytest.Pytester) -> None:
    everything = project.runpytest_subprocess("--collect-only", "-q")
    everything.stdout.fnmatch_lines([
        "test_catalogue.py::test_scenario[cpu_only]", "test_catalogue.py::test_scenario[gpu_only]",
        "test_catalogue.py::test_scenario[quick]", "test_catalogue.py::test_scenario[wrong]",
        "test_catalogue.py::test_not_a_scenario",
    ])
    chosen = project.runpytest_subprocess("--collect-only", "-q", "--scenario", "quick")
    chosen.stdout.fnmatch_lines(["test_catalogue.py::test_scenario[quick]", "*1/2 tests collected (1 deselected)*"])


def test_scenarios_this_machine_cannot_run_are_skipped_with_the_reason(project: pytest.Pytester) -> None:
    on_cpu = project.runpytest_subprocess("-rs", "--scenario", "gpu_only")
    on_cpu.assert_outcomes(skipped=1)
    on_cpu.stdout.fnmatch_lines(["*gpu_only needs CUDA GPUs (requires: gpu): run it with nox -s gpu on a GPU machine*"])
    on_cuda = project.runpytest_subprocess("-rs", "--scenario", "cpu_only", "--chaos-device", "cuda")
    on_cuda.assert_outcomes(skipped=1)
    on_cuda.stdout.fnmatch_lines(["*cpu_only proves a CPU/gloo behaviour (requires: cpu)*"])
    (project.path / "scenarios" / "slurm_only.yaml").write_text(
        "name: slurm_only\ndescription: a Slurm job\nworld_size: 1\nrequires: slurm\nslurm: {job_retries: 1}\n"
    )
    local = project.runpytest_subprocess("-rs", "--scenario", "slurm_only")
    local.assert_outcomes(skipped=1)
    local.stdout.fnmatch_lines(["*slurm_only runs as a Slurm job (requires: slurm): nox -s slurm, or python -m chaos run --slurm*"])


def test_each_verdict_is_a_junit_property_and_a_failed_one_fails_its_test(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess(
        "--scenario", "quick", "--scenario", "wrong", f"--chaos-out={project.path / 'runs'}", "--junitxml=junit.xml",
    )
    result.assert_outcomes(passed=1, failed=1)
    cases = {case.get("name"): case for case in ET.parse(project.path / "junit.xml").iter("testcase")}
    quick = {p.get("name"): p.get("value") for p in cases["test_scenario[quick]"].iter("property")}
    assert quick["verdict.completed_steps"] == "completed_steps: expected == 2, observed 2"
    assert quick["verdict.processes_reaped"] == "processes_reaped: expected no process, namespace or link of the run left, observed none"
    wrong = {p.get("name"): p.get("value") for p in cases["test_scenario[wrong]"].iter("property")}
    assert wrong["verdict.completed_steps"] == "completed_steps: expected == 3, observed 2"
    assert (project.path / "runs" / "summary.md").read_text().count("| quick | passed |") == 1


def test_verdict_values_are_junit_properties_of_their_own_and_the_session_has_a_summary_json(
    project: pytest.Pytester,
) -> None:
    """A dashboard reads numbers, not sentences: each verdict's observed value, its bounds and its outcome."""
    result = project.runpytest_subprocess(
        "--scenario", "quick", "--scenario", "wrong", f"--chaos-out={project.path / 'runs'}", "--junitxml=junit.xml",
    )
    result.assert_outcomes(passed=1, failed=1)
    cases = {case.get("name"): case for case in ET.parse(project.path / "junit.xml").iter("testcase")}
    wrong = {p.get("name"): p.get("value") for p in cases["test_scenario[wrong]"].iter("property")}
    assert {k: v for k, v in wrong.items() if k.startswith("verdict.completed_steps")} == {
        "verdict.completed_steps": "completed_steps: expected == 3, observed 2",
        "verdict.completed_steps.observed": "2",
        "verdict.completed_steps.min": "3",
        "verdict.completed_steps.max": "3",
        "verdict.completed_steps.passed": "false",
    }
    assert wrong["verdict.exit_code.observed"] == "0" and wrong["verdict.exit_code.passed"] == "true"
    summary = json.loads((project.path / "runs" / "summary.json").read_text())
    assert (summary["passed"], summary["failed"]) == (1, 1)
    by_name = {run["scenario"]: run for run in summary["runs"]}
    assert by_name["quick"]["passed"] and not by_name["wrong"]["passed"]
    steps = next(v for v in by_name["wrong"]["verdicts"] if v["name"] == "completed_steps")
    assert (steps["observed"], steps["bounds"], steps["passed"]) == (2, {"min": 3, "max": 3}, False)
    assert by_name["wrong"]["metrics"]["completed_steps"] == 2 and Path(by_name["wrong"]["journal"]).is_file()


def test_a_session_spread_over_xdist_workers_shares_one_machine_slot(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess("-n", "2", "--scenario", "quick", "--scenario", "wrong", f"--chaos-out={project.path / 'runs'}")
    result.assert_outcomes(passed=1, failed=1)
    summary = (project.path / "runs" / "summary.md").read_text()
    assert "| quick | passed |" in summary and "| wrong | failed |" in summary


KNOWN = COMMAND_SCENARIO + """\
known_failure: {{reason: "upstream bug #1: the third step never comes", verdicts: [completed_steps], signature: "{signature}"}}
"""


def test_packages_a_scenario_needs_and_known_failures_show_their_reasons(project: pytest.Pytester) -> None:
    """A scenario needing an absent package is skipped saying which; one failing exactly as its known
    failure says is an expected failure with the reason; one that no longer fails so is a failure."""
    folder = project.path / "scenarios"
    (folder / "needs_bridge.yaml").write_text(COMMAND_SCENARIO.format(name="needs_bridge", requires="any", steps=2)
                                              + "needs: [megatron-bridge]\n")
    for name, steps, signature in (("known_bug", 3, "step 2"), ("known_fixed", 2, "step 2"), ("other_bug", 3, "Traceback")):
        (folder / f"{name}.yaml").write_text(KNOWN.format(name=name, requires="any", steps=steps, signature=signature))
    args = [f"--scenario={n}" for n in ("needs_bridge", "known_bug", "known_fixed", "other_bug")]
    result = project.runpytest_subprocess("-rsxf", *args, f"--chaos-out={project.path / 'runs'}")
    result.assert_outcomes(skipped=1, xfailed=1, failed=2)
    result.stdout.fnmatch_lines([
        "*needs_bridge needs megatron-bridge, not installed here*",
        "*known failure, as catalogued: upstream bug #1: the third step never comes*",
    ])
    summary = (project.path / "runs" / "summary.md").read_text()
    assert "| known_bug | known failure |" in summary and "| known_fixed | failed |" in summary
    assert "| other_bug | failed |" in summary, "the same verdict failing without the upstream error's signature"
