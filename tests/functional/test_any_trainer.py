"""Any trainer: process faults from outside into a standalone DDP script (tests/functional/standalone,
torch only), with its steps read from its output lines. Each case is a real multi-process run."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.schema.loader import parse_scenario
from chaos.supervise.runner import run_scenario
from runlog.reader import read_events

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


GRACEFUL = """
import os, signal, sys, time
rank, ckpt = int(os.environ["RANK"]), sys.argv[1]
start = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
step = start


def finish_and_exit(signum, frame):
    print(f"step {step + 1} loss 1.0", flush=True)  # the iteration in flight, finished before it goes
    sys.exit(0)


signal.signal(signal.SIGTERM, finish_and_exit)
for step in range(start + 1, 21):
    time.sleep(0.1)
    if rank == 0:
        print(f"step {step} loss 1.0", flush=True)
        if step % 5 == 0:
            with open(ckpt + ".tmp", "w") as f:
                f.write(str(step))
            os.replace(ckpt + ".tmp", ckpt)
"""


@pytest.mark.parametrize("launcher", ["ft_launcher", "torchrun"])
def test_a_step_a_stopped_rank_prints_after_the_restart_line_is_its_own_attempts(tmp_path: Path, launcher: str) -> None:
    """A launcher logs its restart decision before it stops the surviving workers with SIGTERM; a rank that
    finishes its iteration on SIGTERM prints that step after the restart line. It is still attempt 0's: the
    resume reads as one from the step-5 checkpoint, not from the stopped rank's last step."""
    (tmp_path / "graceful.py").write_text(GRACEFUL)
    s = parse_scenario(
        {
            "schema_version": 1, "name": "standalone_graceful", "description": "a step printed while stopped",
            "world_size": 2, "launcher": launcher, "max_restarts": 1, "step_pattern": PATTERN,
            "command": ["python", str(tmp_path / "graceful.py"), "{run_dir}/ckpt.txt"],
            "faults": [{"type": "sigkill", "rank": 1, "at_step": 7}],
            "expect": {"exit_code": 0, "restarts": 1, "completed_steps": 20, "resumed_from_step": 5},
        },
        "standalone_graceful",
    )
    outcome = run_scenario(s, tmp_path, progress=None)
    assert outcome.passed, outcome.summary
    log = (outcome.run_dir / "launcher.log").read_text().splitlines()
    restart = next(i for i, x in enumerate(log) if "will restart worker group" in x)
    late = next(x for x in log[restart:] if x.startswith("step "))
    steps = [(e["attempt"], e["iteration"]) for e in read_events(outcome.run_dir) if e["event"] == "step"]
    assert (0, int(late.split()[1])) in steps, (late, steps)
    assert [i for a, i in steps if a == 1] == list(range(6, 21)), steps
