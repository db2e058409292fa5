"""Megatron in the external-trainer mode, on CPU: real processes that print real recorded Megatron lines.

Each case runs a `command:` scenario with `adapter: megatron` whose command is the replay of a run recorded
on the lent GPU (tests/functional/standalone/megatron_replay.py, tests/data/megatron): a real process under
the real ft_launcher or torchrun, killed by the runner's real signal at a Megatron iteration the adapter
read live, restarted or relaunched by the real launcher, and judged from the events the adapter wrote.
The real Megatron runs are the GPU suite's (scenarios/megatron_*.yaml, bridge_*.yaml).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.schema.loader import parse_scenario
from chaos.supervise.runner import run_scenario
from runlog.reader import read_events

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "megatron"
REPLAY = ROOT / "tests" / "functional" / "standalone" / "megatron_replay.py"
SPEED = "3"
"""The recorded pace, 3 times faster: MLM's steps 45 ms apart, so a kill the runner sends within its 0.1 s
tick lands a few steps after the one it fired at, well before the recording's own kill at step 40."""


def replay(name: str, launcher: str, segments: list[str], faults: list[dict], expect: dict, **extra):
    command = ["python", str(REPLAY), "--state", "{run_dir}/replay-state", "--speed", SPEED]
    data = {
        "schema_version": 1, "name": name, "description": f"recorded Megatron lines replayed: {segments}",
        "world_size": 1, "launcher": launcher, "command": command + [str(DATA / s) for s in segments],
        "adapter": "megatron", "faults": faults, "expect": expect, **extra,
    }
    return parse_scenario(data, name)


def observed(run_dir: Path, event: str) -> list[dict]:
    return [e for e in read_events(run_dir) if e["event"] == event and e.get("observed")]


def test_megatron_lm_killed_at_its_iteration_resumes_with_the_learned_timeouts(tmp_path: Path) -> None:
    """mlm_ft_kill (Megatron-LM, --enable-ft-package --calc-ft-timeouts) under the real ft_launcher: the
    runner SIGKILLs the rank once the adapter reads iteration 31; the launcher restarts it; the second
    attempt loads the iteration-30 checkpoint and starts with the timeouts learned in the first."""
    s = replay(
        "megatron_lm_replay_killed", "ft_launcher", ["mlm_ft_kill/output.log:killed,0"],
        [{"type": "sigkill", "rank": 0, "at_step": 31}],
        {"exit_code": 0, "restarts": 1, "resumed_from_step": 30, "completed_steps": 100, "lost_steps": {"max": 9},
         "faults_injected": 1, "time_to_detect_s": {"max": 5}, "time_to_recover_s": {"max": 40},
         "learned_timeouts_used": True, "exit_reason": "completed"},
    )
    outcome = run_scenario(s, tmp_path, progress=None)
    assert outcome.passed, outcome.summary
    m = outcome.journal["metrics"]
    assert m["detected_by"] == "worker_failed" and m["fault_attempt"] == 0
    timeouts = observed(outcome.run_dir, "ft_timeouts")
    assert [(e["attempt"], e["calculated"]) for e in timeouts] == [(0, False), (1, True)]
    assert timeouts[1]["sections"]["step"] == 1.41, "the learned step timeout of ft_state.json"
    (load,) = observed(outcome.run_dir, "checkpoint_load")
    assert (load["attempt"], load["iteration"]) == (1, 30)
    lines = (outcome.run_dir / "launcher.log").read_text().splitlines()
    assert "successfully loaded checkpoint" in lines[load["line"] - 1], "`line` is the event's line in launcher.log"
    rejudged = subprocess.run(
        [sys.executable, "-m", "chaos", "judge", str(outcome.run_dir)], cwd=ROOT, capture_output=True, text=True,
        timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))},
    )
    assert rejudged.returncode == 0, rejudged.stdout + rejudged.stderr
    again = json.loads((outcome.run_dir / "journal.json").read_text())
    assert again["verdicts"] == outcome.journal["verdicts"] and again["metrics"] == outcome.journal["metrics"]


def test_rerun_state_machine_exit_16_then_17_on_another_node(tmp_path: Path) -> None:
    """rerun_persistent (Megatron-Core's rerun state machine, validate_results, persistent error) under
    torchrun with no restarts: exit 16 with a checkpoint, relaunch on another node identity, exit 17."""
    s = replay(
        "megatron_replay_rerun", "torchrun",
        ["rerun_persistent/1_first/output.log:16", "rerun_persistent/3_other_node/output.log:17"], [],
        {"trainer_exit_codes": [16, 17], "rerun_diagnosis": "persistent_error", "restarts": 1},
        max_restarts=0, relaunch=True, relaunch_env={"CHAOS_NODE_ID": "megatron-node-b"},
    )
    outcome = run_scenario(s, tmp_path, progress=None)
    assert outcome.passed, outcome.summary
    exits = observed(outcome.run_dir, "exit")
    assert [(e["attempt"], e["reason"], e["code"]) for e in exits] == [(0, "rerun", 16), (1, "rerun", 17)]
    failed = [e["exitcode"] for e in read_events(outcome.run_dir) if e["event"] == "worker_failed"]
    assert failed == [16, 17], "torchrun saw the codes the adapter read"


def test_bridge_async_save_overlaps_steps_and_a_kill_after_it_resumes_from_it(tmp_path: Path) -> None:
    """bridge_async_kill_after (Bridge, async torch_dist saves every 10) under the real ft_launcher: the
    save of 20 is finalized after iterations 21-22 ran; the kill at 24 loses what came after it."""
    s = replay(
        "bridge_replay_async_killed", "ft_launcher",
        ["bridge_async_kill_after/1_sigkill/output.log:killed", "bridge_async_kill_after/2_resume/output.log:0"],
        [{"type": "sigkill", "rank": 0, "at_step": 24}],
        {"exit_code": 0, "restarts": 1, "resumed_from_step": 20, "completed_steps": 60, "lost_steps": {"max": 6},
         "steps_during_async_save": {"min": 2}, "time_to_detect_s": {"max": 5}},
    )
    outcome = run_scenario(s, tmp_path, progress=None)
    assert outcome.passed, outcome.summary
    saves = [(e["attempt"], e["iteration"], e["async"]) for e in observed(outcome.run_dir, "checkpoint_save_end")]
    assert saves[:2] == [(0, 10, True), (0, 20, True)] and all(a == 1 for a, _, _ in saves[2:])


@pytest.mark.skipif(os.geteuid() != 0, reason="a new UTS namespace (unshare) needs root")
def test_on_node_gives_the_script_the_hostname_megatron_reads(tmp_path: Path) -> None:
    """drivers/on_node.py: what the rerun scenarios wrap Megatron in, so a relaunch lands on another node."""
    script = tmp_path / "uname.py"
    script.write_text("import os, sys; print(os.uname()[1], os.getpid()); sys.exit(17)\n")
    env = {**os.environ, "CHAOS_NODE_ID": "megatron-node-b"}
    run = subprocess.Popen([sys.executable, str(ROOT / "drivers" / "on_node.py"), str(script)], env=env,
                           stdout=subprocess.PIPE, text=True)
    out, _ = run.communicate(timeout=30)
    assert run.returncode == 17, "the script's own exit code"
    assert out.splitlines()[-1] == f"megatron-node-b {run.pid}", "the same process, another hostname"
    same = subprocess.run([sys.executable, str(ROOT / "drivers" / "on_node.py"), str(script)], capture_output=True,
                          text=True, timeout=30, env={k: v for k, v in os.environ.items() if k != "CHAOS_NODE_ID"})
    assert same.stdout.split()[0] == os.uname()[1]
