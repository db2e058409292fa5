"""`python -m chaos explore` end to end: real runs of a one-rank base, as a user runs it.

A clean trainer keeps every invariant (exit 0); a trainer with a planted resiliency bug breaks one, and the
shrunk schedule's scenario file reproduces it through `chaos run` in the same tree and passes in a clean one;
bad input is one line and exit 2, before anything is launched.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks.mutants.bench import project_copy
from benchmarks.mutants.catalogue import MUTANTS, Mutant
from chaos.judge.baseline import cache_dir
from trainer.config import cuda_available

PROJECT_ROOT = Path(__file__).resolve().parents[2]
BASE = {
    "schema_version": 1, "name": "explore_tiny", "description": "one rank, checkpoints every 2 of 4 steps",
    "world_size": 1, "launcher": "ft_launcher", "max_restarts": 1, "deadline_s": 90,
    "trainer": {"train.train_iters": 4, "checkpoint.save_interval": 2, "ft.enable_ft_package": True},
}
EVERY_RESTART_LATE = Mutant(
    "restart_late", "every restart resumes one iteration late, from a checkpoint or from nothing", "trainer/loop.py",
    "self.iteration = self.checkpointer.load(self)", "self.iteration = self.checkpointer.load(self) + (self.events.attempt > 0)",
    (), "",
)


def base_file(folder: Path, **changes) -> Path:
    path = folder / f"{changes.get('name', BASE['name'])}.yaml"
    path.write_text(yaml.safe_dump({**BASE, **changes}, sort_keys=False))
    return path


def chaos(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root), "CHAOS_CACHE_DIR": str(cache_dir())}
    return subprocess.run([sys.executable, "-m", "chaos", *args], cwd=root, env=env, capture_output=True, text=True, timeout=600)


def test_a_clean_trainer_keeps_every_invariant(tmp_path):
    out = tmp_path / "explore"
    proc = chaos(PROJECT_ROOT, "explore", str(base_file(tmp_path)), "--budget", "30s", "--faults", "rank_killed",
                 "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["schedules_judged"] >= 1 and result["found"] == []
    assert result["kinds"] == ["rank_killed"]
    assert "explore: 1 judged, 0 found" in proc.stderr
    assert (out / "schedules.png").stat().st_size > 0
    assert "| schedules judged |" in (out / "explore.md").read_text()
    assert len((out / "judged.jsonl").read_text().splitlines()) == result["schedules_judged"]


def test_a_planted_bug_is_found_shrunk_and_reproduced_by_chaos_run(tmp_path):
    tree = project_copy(EVERY_RESTART_LATE, tmp_path / "tree", committed=False)
    out = tmp_path / "explore"
    # The budget is a bound: the search ends once hypothesis has shrunk its failure (nothing is simpler).
    proc = chaos(tree, "explore", str(base_file(tmp_path)), "--budget", "150s", "--faults", "rank_killed", "--reruns", "1",
                 "--out", str(out), "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = json.loads(proc.stdout)["found"]
    assert [f["invariant"] for f in found] == ["same_as_baseline"]
    # The canonical schedule (a kill right after the first checkpoint, step 3) broke it first; hypothesis's
    # own first draw, a kill before step 1, broke it too and is the simplest there is.
    assert found[0]["schedule"] == [{"type": "rank_killed", "rank": 0, "at_step": 1}]
    assert found[0]["reproduced"] == "always"
    scenario = Path(found[0]["scenario"])
    assert scenario.parent == out / "found"
    again = chaos(tree, "run", str(scenario), "--json", "--out", str(tmp_path / "again"))
    assert again.returncode == 1, again.stderr
    assert [v["name"] for v in json.loads(again.stdout)["verdicts"] if not v["passed"]] == ["baseline"]
    clean = chaos(PROJECT_ROOT, "run", str(scenario), "--out", str(tmp_path / "clean"))
    assert clean.returncode == 0, clean.stdout  # the bug, not the schedule's expectations


def test_a_retention_bug_behind_a_setting_is_found_when_the_base_draws_the_setting(tmp_path):
    """The base keeps every checkpoint; its explore.settings draw retention 1 too. The planted bug (retention
    keeps k - 1) runs only there: explore finds it, and the found scenario file states the setting."""
    mutant = next(m for m in MUTANTS if m.name == "retention_keeps_one_fewer")
    tree = project_copy(mutant, tmp_path / "tree", committed=False)
    base = base_file(tmp_path, explore={"settings": {"checkpoint.most_recent_k": [-1, 1]}})
    proc = chaos(tree, "explore", str(base), "--budget", "150s", "--faults", "rank_killed", "--reruns", "1",
                 "--out", str(tmp_path / "explore"), "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = {f["invariant"]: f for f in json.loads(proc.stdout)["found"]}
    assert "retention" in found, found
    assert found["retention"]["settings"] == {"checkpoint.most_recent_k": 1}
    scenario = yaml.safe_load(Path(found["retention"]["scenario"]).read_text())
    assert scenario["trainer"]["checkpoint.most_recent_k"] == 1 and "explore" not in scenario
    clean = chaos(PROJECT_ROOT, "run", found["retention"]["scenario"], "--out", str(tmp_path / "clean"))
    assert clean.returncode == 0, clean.stdout  # the bug, not the schedule's expectations


@pytest.mark.parametrize(("change", "args", "says"), [
    ({"world_size": 0}, (), "world_size: must be greater than or equal to 1, got 0"),
    ({}, ("--budget", "1s"), "--budget: 1 s cannot fit one run of explore_tiny"),
    ({}, ("--budget", "ten"), "--budget: 'ten' is not a duration"),
    ({}, ("--faults", "rank_killed,bogus"), "--faults: unknown fault type 'bogus'"),
    ({"explore": {"settings": {"checkpoint.most_recent_k": [1, 0]}}}, (),
     "explore.settings.checkpoint.most_recent_k: 0: checkpoint.most_recent_k: -1 (keep all) or >= 1, got 0"),
    ({"trainer": {"train.train_iters": 4}}, ("--faults", "checkpoint_corrupt"),
     "--faults: checkpoint_corrupt cannot be explored on explore_tiny.yaml"),
    pytest.param({"requires": "gpu"}, (), "explore_tiny needs CUDA GPUs (requires: gpu)", marks=pytest.mark.skipif(
        cuda_available(), reason="a GPU machine runs a requires: gpu base")),
], ids=["invalid-base", "budget-too-small", "budget-not-a-duration", "unknown-fault", "bad-settings-range", "fault-not-on-this-base", "gpu-base-on-cpu"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, change, args, says):
    proc = chaos(PROJECT_ROOT, "explore", str(base_file(tmp_path, **change)), "--out", str(tmp_path / "out"), *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("error: ") and says in proc.stderr, proc.stderr
    assert not (tmp_path / "out" / "runs").exists()


STANDALONE = PROJECT_ROOT / "tests" / "functional" / "standalone" / "ddp_train.py"


def command_base(folder: Path, name: str, *args: str) -> Path:
    """A foreign DDP script (torch only) as the base: one rank, 9 steps of 0.5 s, a checkpoint every 3. Its
    script is named relative to the base's folder, as in the catalogue: the found scenario, written elsewhere,
    must still find it."""
    return base_file(
        folder, name=name, description="a foreign trainer, seen from outside", trainer={}, deadline_s=120,
        command=["python", os.path.relpath(STANDALONE, folder), "--steps", "9", "--save-every", "3", "--step-delay", "0.5", *args,
                 "--ckpt", "{run_dir}/ckpt.pt"],
        step_pattern=r"^step (?P<step>\d+) loss (?P<loss>\S+)",
    )


def test_a_command_whose_resume_crashes_is_found_from_its_fault_free_run(tmp_path):
    """The CPU shape of Bridge's distributed-optimizer resume: a trainer that cannot load its own checkpoint.
    Explore learns the steps from the fault-free run, draws kills from outside, and shrinks to the first kill
    that leaves a checkpoint to load: right at the first one (step 3)."""
    out = tmp_path / "explore"
    proc = chaos(PROJECT_ROOT, "explore", str(command_base(tmp_path, "cmd_crash_on_resume", "--crash-on-resume")),
                 "--budget", "240s", "--reruns", "1", "--out", str(out), "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["kinds"] == ["sigkill"] and result["steps"] == list(range(1, 10))
    found = {f["invariant"]: f for f in result["found"]}
    assert {"completes", "failures_explained"} <= found.keys(), found
    assert found["completes"]["schedule"] == [{"type": "sigkill", "rank": 0, "at_step": 3}]
    assert found["completes"]["reproduced"] == "always"
    assert "cannot resume from the step-3 checkpoint" in found["failures_explained"]["evidence"]
    assert json.loads((out / "observed.json").read_text())["train_iters"] == 9


def test_a_command_that_fails_without_faults_is_refused_with_its_failure(tmp_path):
    out = tmp_path / "out"
    proc = chaos(PROJECT_ROOT, "explore", str(command_base(tmp_path, "cmd_port_clash", "--port-clash-first-attempt")),
                 "--budget", "120s", "--out", str(out))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: cmd_port_clash: its fault-free run failed (") and "see " in line, line
    assert not (out / "observed.json").exists()
