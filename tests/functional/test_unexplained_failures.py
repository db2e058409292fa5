"""Every failure accounted for, as users meet it: a trainer that dies at start-up of its own on its first
attempt (a real EADDRINUSE from the kernel, no fault involved) and then succeeds is no recovery.

The GPU suite's bridge_async_save_killed_after on CPU: attempt 0 died of a port clash before its planned
SIGKILL at step 28, ft_launcher restarted it and attempt 1 trained to the end. It used to pass every
harness check; now the run is *broken* (pytest's ERROR at set-up, JUnit <error>, `chaos judge` exit 3), its
report quotes the cause line, and the kill is named as never due. The same crash, expected by name
(expect.failures_not_injected), passes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

SCRIPT = Path(__file__).parent / "standalone" / "ddp_train.py"
CAUSE = "OSError: [Errno 98] Address already in use"

SCENARIO = """\
schema_version: 1
name: {name}
description: a foreign trainer whose first attempt dies at start-up of a port clash, no fault involved
world_size: 2
launcher: ft_launcher
command: [python, {script}, --steps, "30", --step-delay, "0.01", --ckpt, "{{run_dir}}/ckpt.pt", --port-clash-first-attempt]
step_pattern: '^step (?P<step>\\d+) loss (?P<loss>\\S+)'
faults: {faults}
expect: {expect}
"""

TEST = """\
def test_scenario(scenario_outcome):
    assert scenario_outcome.passed, scenario_outcome.summary
"""


def _chaos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos", *args], capture_output=True, text=True, timeout=240)


def test_a_start_up_death_before_the_fault_is_a_broken_run_naming_its_cause_and_the_fault_never_due(
    pytester: pytest.Pytester,
) -> None:
    (pytester.path / "scenarios").mkdir()
    (pytester.path / "scenarios" / "clash.yaml").write_text(SCENARIO.format(
        name="clash", script=SCRIPT, faults="[{type: sigkill, rank: 0, at_step: 28}]",
        expect="{exit_code: 0, restarts: 1, completed_steps: 30}",
    ))
    pytester.makepyfile(test_catalogue=TEST)
    result = pytester.runpytest_subprocess(
        "--chaos-out", "runs", "--junitxml", "junit.xml", "-o", "junit_family=xunit1", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(errors=1)  # a broken run is the test's error, not a resiliency failure
    result.stdout.fnmatch_lines(["*ERROR at setup of test_scenario*", "*broken run, not a resiliency verdict*",
                                 "*unexplained_failures*Address already in use*"])
    case = ET.parse(pytester.path / "junit.xml").getroot().find(".//testcase")
    assert case is not None and case.find("error") is not None and case.find("failure") is None

    (run_dir,) = (pytester.path / "runs").glob("clash-*")
    judged = _chaos("judge", str(run_dir))
    assert judged.returncode == 3, judged.stdout + judged.stderr
    assert "clash: BROKEN" in judged.stdout
    assert "FAIL unexplained_failures: expected none, observed attempt 0, rank" in judged.stdout
    assert CAUSE in judged.stdout
    assert "f0 sigkill: never came due (attempt 0 ran no step and ended before its trigger at step 28)" in judged.stdout
    record = json.loads(_chaos("judge", str(run_dir), "--json").stdout)
    assert (record["status"], record["passed"]) == ("broken", False)
    logged = [json.loads(line) for line in (run_dir / "events" / "accounting.jsonl").read_text().splitlines()]
    assert [(e["event"], e["attempt"]) for e in logged] == [("unexplained_failure", 0), ("fault_never_due", 0)]
    assert logged[0]["cause"] == CAUSE


def test_the_same_crash_expected_by_name_passes_and_unexpected_with_no_fault_at_all_is_broken(tmp_path: Path) -> None:
    """No fault planned: the crash at start-up, then a clean attempt. Expected by name, the run passes; the
    same run judged by the same scenario without that expectation (its folder's scenario copy) is broken."""
    path = tmp_path / "clash_expected.yaml"
    path.write_text(SCENARIO.format(
        name="clash_expected", script=SCRIPT, faults="[]",
        expect="{exit_code: 0, restarts: 1, completed_steps: 30, "
               "failures_not_injected: [{name: own_port_clash, cause: 'Address already in use', attempt: 0}]}",
    ))
    ran = _chaos("run", str(path), "--out", str(tmp_path / "runs"))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "ok   unexplained_failures: expected exactly own_port_clash (cause contains 'Address already in use')" in ran.stdout

    (run_dir,) = (tmp_path / "runs").glob("clash_expected-*")
    copy = run_dir / "scenario.yaml"
    scenario = yaml.safe_load(copy.read_text())
    scenario["expect"]["failures_not_injected"] = None
    copy.write_text(yaml.safe_dump(scenario))
    judged = _chaos("judge", str(run_dir))
    assert judged.returncode == 3, judged.stdout + judged.stderr
    assert "clash_expected: BROKEN" in judged.stdout
    assert "FAIL unexplained_failures: expected none, observed attempt 0, rank" in judged.stdout and CAUSE in judged.stdout
    assert "ok   restarts" in judged.stdout  # the restart happened, and is no recovery
