"""Any trainer: process faults from outside into a standalone DDP script (tests/functional/standalone,
torch only), with its steps read from its output lines. Each case is a real multi-process run."""

from __future__ import annotations

from pathlib import Path

from chaos.runner import run_scenario
from chaos.scenario import parse_scenario

SCRIPT = ["python", "tests/functional/standalone/ddp_train.py", "--ckpt", "{run_dir}/ckpt.pt", "--steps", "30"]
PATTERN = r"^step (?P<step>\d+) loss (?P<loss>\S+)"


def _scenario(name: str, launcher: str, fault: dict, expect: dict):
    data = {
        "schema_version": 1, "name": name, "description": "standalone script", "world_size": 2,
        "launcher": launcher, "command": SCRIPT, "step_pattern": PATTERN, "faults": [fault], "expect": expect,
    }
    return parse_scenario(data, name)


def test_duty_cycle_slows_a_foreign_script_under_torchrun(tmp_path: Path) -> None:
    s = _scenario(
        "standalone_duty_cycle", "torchrun",
        {"type": "duty_cycle", "target": "all", "at_step": 5, "stop_s": 0.5, "run_s": 0.3, "cycles": 3},
        {"exit_code": 0, "restarts": 0, "completed_steps": 30, "faults_injected": 1},
    )
    outcome = run_scenario(s, tmp_path, progress=None)
    assert outcome.passed, outcome.summary
    sent = [m for m in outcome.journal["timeline"] if m["event"] == "signal_sent"]
    assert [m["info"]["signal"] for m in sent] == ["SIGSTOP", "SIGSTOP", "SIGCONT", "SIGCONT"] * 3


def test_sigterm_to_a_foreign_script_under_ft_launcher_restarts_it(tmp_path: Path) -> None:
    s = _scenario(
        "standalone_sigterm", "ft_launcher",
        {"type": "sigterm", "rank": 0, "at_step": 8, "grace_s": 5},
        {"exit_code": 0, "restarts": 1, "completed_steps": 30, "lost_steps": {"max": 8}, "grace_killed": False},
    )
    outcome = run_scenario(s, tmp_path, progress=None)
    assert outcome.passed, outcome.summary
