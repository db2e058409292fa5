"""Any trainer: process faults from outside into a standalone DDP script (tests/functional/standalone,
torch only), with its steps read from its output lines. Each case is a real multi-process run."""

from __future__ import annotations

from pathlib import Path

from chaos.schema.loader import parse_scenario
from chaos.supervise.runner import run_scenario

SCRIPT = ["python", str(Path(__file__).parent / "standalone" / "ddp_train.py"), "--ckpt", "{run_dir}/ckpt.pt", "--steps", "30"]
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


def test_a_run_keeps_its_temporary_files_in_a_folder_removed_after_it(tmp_path: Path) -> None:
    """ft_launcher's IPC sockets go to the run's own TMPDIR, not the machine's /tmp, where a killed node's
    would be left behind for good."""
    show = "import os, tempfile; d = tempfile.gettempdir(); print('tmp', d, *sorted(os.listdir(d))); print('step 1 loss 1')"
    s = parse_scenario(
        {
            "schema_version": 1, "name": "standalone_tmpdir", "description": "where temporary files go",
            "world_size": 1, "launcher": "ft_launcher", "command": ["python", "-c", show], "step_pattern": PATTERN,
            "faults": [], "expect": {"exit_code": 0, "completed_steps": 1},
        },
        "standalone_tmpdir",
    )
    outcome = run_scenario(s, tmp_path, progress=None)
    assert outcome.passed, outcome.summary
    line = next(x for x in (outcome.run_dir / "launcher.log").read_text().splitlines() if x.startswith("tmp "))
    folder, *files = line.split()[1:]
    assert Path(folder).name.startswith("chaos-tmp-")
    assert any(f.startswith("_ft_launcher") and f.endswith(".socket") for f in files), files
    assert not Path(folder).exists()
