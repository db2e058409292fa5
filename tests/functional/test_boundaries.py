"""The product's edges as a user meets them (issue 13): the CLI as a subprocess, on real files and runs.

Every case here failed on main at f213780: a traceback or silence where a one-line error belongs, a
process that outlived its runner, a verdict that counted what did not happen.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RUN_ID_VAR = "CHAOS_RUN_ID"


def chaos_env(**extra: str) -> dict[str, str]:
    env = {"PYTHONPATH": str(ROOT), "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "CHAOS_CACHE_DIR": str(ROOT / ".chaos-cache"), **extra}
    return env


def chaos(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "chaos", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env=chaos_env(),
    )


def one_line_error(result: subprocess.CompletedProcess, *names: str) -> str:
    """A bad input's answer: exit 2, one line on stderr that names what is wrong, no traceback."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, result.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


def write_scenario(folder: Path, name: str, **fields) -> Path:
    data = {"schema_version": 1, "name": name, "description": "a test scenario", "world_size": 2, **fields}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_processes(run_id: str) -> list[int]:
    """Live (non-zombie) processes carrying the run's marker variable."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if f"{RUN_ID_VAR}={run_id}".encode() in env and state != "Z":
            found.append(int(entry.name))
    return found


def wait_for(predicate, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


# ----------------------------------------------------------------------------------- 1. reaping
@pytest.mark.slow
@pytest.mark.parametrize(
    "launcher, fault",
    [
        ("ft_launcher", {"type": "rank_killed", "rank": 1, "at_step": 40}),  # the launcher keeps restarting
        ("torchrun", {"type": "rank_hung", "rank": 1, "at_step": 3}),  # a hung job torchrun never notices
    ],
)
def test_a_sigkilled_runner_takes_its_run_with_it(tmp_path: Path, launcher: str, fault: dict) -> None:
    trainer = {"train.train_iters": 100000, "checkpoint.save_interval": 5, "ft.enable_ft_package": launcher == "ft_launcher"}
    path = write_scenario(tmp_path, f"reap_{launcher}", launcher=launcher, trainer=trainer, faults=[fault],
                          max_restarts=50, deadline_s=600, expect={"exit_code": 0})
    out = tmp_path / "runs"
    runner = subprocess.Popen([sys.executable, "-m", "chaos", "run", str(path), "--out", str(out)], cwd=tmp_path,
                              env=chaos_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run_dir = wait_for(lambda: next(out.glob("reap_*"), None), 60, "the run folder")
        wait_for(lambda: list((run_dir / "events").glob("rank-*.jsonl")), 120, "the ranks to start")
        workers = wait_for(lambda: run_processes(run_dir.name), 30, "the run's processes")
        tmp_dirs = {Path(d) for pid in workers if (d := _env_of(pid).get("TMPDIR"))}
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=10)
        left = _wait_gone(run_dir.name, 10)
        assert not left, f"processes of the run outlived its SIGKILLed runner: {left}"
    finally:
        runner.kill()
        for pid in run_processes(run_dir.name) if "run_dir" in locals() else ():
            os.kill(pid, signal.SIGKILL)
    # The next start sweeps what the dead runner left: its temporary folder and its port claims.
    result = chaos("validate", str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    second = write_scenario(tmp_path, "after_reap", world_size=1, launcher="torchrun",
                            trainer={"train.train_iters": 3}, expect={"exit_code": 0})
    done = chaos("run", str(second), "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert tmp_dirs and not any(d.exists() for d in tmp_dirs), tmp_dirs


def _start_reap_run(tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path]:
    """A runner (`chaos run`) of an ft_launcher job that would go on for minutes, once its ranks train."""
    trainer = {"train.train_iters": 100000, "checkpoint.save_interval": 5, "ft.enable_ft_package": True}
    path = write_scenario(tmp_path, name, launcher="ft_launcher", trainer=trainer, deadline_s=600, expect={"exit_code": 0})
    out = tmp_path / "runs"
    runner = subprocess.Popen([sys.executable, "-m", "chaos", "run", str(path), "--out", str(out)], cwd=tmp_path,
                              env=chaos_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_dir = wait_for(lambda: next(out.glob(f"{name}-*"), None), 60, "the run folder")
    wait_for(lambda: any("step" in x for x in _lines(run_dir / "events" / "rank-1.jsonl")), 120, "rank 1 to train")
    return runner, run_dir


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _start_time(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


@pytest.mark.slow
def test_the_next_run_sweeps_what_a_runner_killed_with_its_watchdog_left(tmp_path: Path) -> None:
    """Runner and watchdog SIGKILLed together: the launcher still dies at once (its parent-death signal); its
    orphaned workers are this test's to kill; the next run removes the dead runner's temporary folder and
    port claims, and leaves a live owner's folder, and one that names no owner, alone."""
    runner, run_dir = _start_reap_run(tmp_path, "reap_swept")
    try:
        (watchdog,) = [c for c in _children(runner.pid) if "chaos.supervise.watchdog" in _cmdline(c)]
        (launcher,) = [c for c in _children(runner.pid) if "--rdzv-endpoint=" in _cmdline(c)]  # not nshold.py
        tmp_dir = Path(_env_of(launcher)["TMPDIR"])
        port = next(int(a.rsplit(":", 1)[1]) for a in _cmdline(launcher).split() if a.startswith("--rdzv-endpoint="))
        claim = Path(tempfile.gettempdir()) / "chaos-port-claims" / str(port)
        assert tmp_dir.is_dir() and claim.is_file()
        os.kill(watchdog, signal.SIGKILL)
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=10)
        wait_for(lambda: launcher not in run_processes(run_dir.name), 2, "the launcher to die with its runner")
    finally:
        runner.kill()
        for pid in run_processes(run_dir.name):
            os.kill(pid, signal.SIGKILL)
    live = Path(tempfile.mkdtemp(prefix="chaos-tmp-test-live-"))
    (live / "owner").write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")
    unowned = Path(tempfile.mkdtemp(prefix="chaos-tmp-test-unowned-"))
    try:
        assert tmp_dir.is_dir() and claim.is_file(), "nothing swept them yet"
        second = write_scenario(tmp_path, "after_sweep", world_size=1, launcher="torchrun",
                                trainer={"train.train_iters": 3}, expect={"exit_code": 0})
        done = chaos("run", str(second), "--out", str(tmp_path / "runs"), cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert not tmp_dir.exists() and not claim.exists()
        assert live.is_dir() and unowned.is_dir()
    finally:
        shutil.rmtree(live)
        shutil.rmtree(unowned)


@pytest.mark.slow
def test_a_sigkilled_pytest_worker_takes_its_run_with_it(tmp_path: Path) -> None:
    """The pytest plugin's run in an xdist worker: the worker is the runner, killed mid-scenario."""
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    write_scenario(scenarios, "reap_in_pytest", launcher="torchrun", trainer={"train.train_iters": 100000},
                   faults=[{"type": "rank_hung", "rank": 1, "at_step": 3}], deadline_s=600, expect={"exit_code": 0})
    (tmp_path / "test_reap.py").write_text("def test_it(scenario_file, run_scenario):\n    run_scenario(scenario_file)\n")
    out = tmp_path / "runs"
    session = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "1", "--max-worker-restart=0",
         "--scenario-dir", str(scenarios), "--chaos-out", str(out), "test_reap.py"],
        cwd=tmp_path, env=chaos_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        run_dir = wait_for(lambda: next(out.glob("reap_in_pytest-*"), None), 120, "the run folder")
        wait_for(lambda: any("fault_injected" in x for x in _lines(run_dir / "events" / "rank-1.jsonl")), 120, "the hang")
        marked = run_processes(run_dir.name)
        (launcher,) = [p for p in marked if os.getsid(p) == p and "RANK" not in _env_of(p)]
        worker = int(Path(f"/proc/{launcher}/stat").read_text().rsplit(")", 1)[1].split()[1])
        assert worker != session.pid and session.pid == int(Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[1])
        os.kill(worker, signal.SIGKILL)
        left = _wait_gone(run_dir.name, 10)
        assert not left, f"processes of the run outlived its SIGKILLed pytest worker: {left}"
    finally:
        session.kill()
        session.communicate(timeout=30)
        for pid in run_processes(run_dir.name) if "run_dir" in locals() else ():
            os.kill(pid, signal.SIGKILL)


def _env_of(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(x.split("=", 1) for x in raw.decode(errors="replace").split("\0") if "=" in x)


def _wait_gone(run_id: str, timeout: float) -> list[int]:
    end = time.monotonic() + timeout
    while (left := run_processes(run_id)) and time.monotonic() < end:
        time.sleep(0.2)
    return left


# --------------------------------------------------------------------- 2. only what happened counts
@pytest.mark.slow
def test_a_signal_fault_fires_at_real_processes_or_the_run_fails(tmp_path: Path) -> None:
    """Workers do not exist 0.1 s into a launch: the fault must wait for them, never 'fire' at nobody."""
    path = write_scenario(
        tmp_path, "early_sigkill", launcher="ft_launcher", max_restarts=1,
        trainer={"train.train_iters": 30, "checkpoint.save_interval": 5, "ft.enable_ft_package": True},
        faults=[{"type": "sigkill", "rank": 1, "after_s": 0.1}],
        expect={"exit_code": 0, "restarts": 1, "faults_injected": 1},
    )
    result = chaos("run", str(path), "--out", str(tmp_path / "runs"), cwd=tmp_path)
    (run_dir,) = (tmp_path / "runs").iterdir()
    injected = [e for e in _events(run_dir / "events" / "launcher.jsonl") if e["event"] == "fault_injected"]
    sent = [e for e in _events(run_dir / "events" / "launcher.jsonl") if e["event"] == "signal_sent"]
    assert len(injected) == 1 and sent, (injected, sent, result.stdout)
    assert injected[0]["detail"] != "ranks pids []", injected
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_a_checkpoint_fault_with_no_checkpoint_to_break_is_not_counted(tmp_path: Path) -> None:
    """Rank 1 dies before the first save: the restart's load has nothing to corrupt, so nothing was injected
    but the kill, and the run fails saying which fault found no target."""
    path = write_scenario(
        tmp_path, "corrupt_nothing", launcher="ft_launcher", max_restarts=1,
        trainer={"train.train_iters": 8, "checkpoint.save_interval": 5, "ft.enable_ft_package": True},
        faults=[{"type": "rank_killed", "rank": 1, "at_step": 3}, {"type": "checkpoint_corrupt", "rank": 0, "attempt": 1}],
        expect={"exit_code": 0, "restarts": 1, "faults_injected": 1},
    )
    result = chaos("run", str(path), "--out", str(tmp_path / "runs"), cwd=tmp_path)
    assert result.returncode == 3, result.stdout + result.stderr  # a broken run: a planned fault found no target
    assert "faults_found_targets" in result.stdout and "no checkpoint to corrupt" in result.stdout, result.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    journal = json.loads((run_dir / "journal.json").read_text())
    assert journal["status"] == "broken" and journal["metrics"]["faults_injected"] == 1
    failed = [v["name"] for v in journal["verdicts"] if not v["passed"]]
    assert failed == ["faults_found_targets"], journal["verdicts"]


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_a_scenario_without_expectations_fails_when_the_job_fails(tmp_path: Path) -> None:
    path = write_scenario(tmp_path, "no_expect", world_size=1, launcher="torchrun", max_restarts=0,
                          command=["python", "-c", "import sys; sys.exit(1)"])
    result = chaos("run", str(path), "--out", str(tmp_path / "runs"), cwd=tmp_path)
    assert result.returncode == 3, result.stdout + result.stderr  # broken: a failure no injected fault explains
    assert "FAIL exit_code" in result.stdout and "FAIL unexplained_failures" in result.stdout


# ------------------------------------------------------------------------------ 3. bad input
def test_an_unwritable_out_folder_is_one_line(tmp_path: Path) -> None:
    one_line_error(chaos("run", "rank_killed", "--out", "/proc/forbidden", cwd=tmp_path), "/proc/forbidden")


@pytest.mark.parametrize("folder", ["missing", "empty"])
def test_list_of_an_empty_or_missing_folder_says_so(tmp_path: Path, folder: str) -> None:
    (tmp_path / "empty").mkdir()
    one_line_error(chaos("list", "--scenario-dir", str(tmp_path / folder), cwd=tmp_path), folder)


def test_a_negative_seed_is_refused(tmp_path: Path) -> None:
    one_line_error(chaos("run", "rank_killed", "--seed", "-1", "--out", str(tmp_path / "runs"), cwd=tmp_path), "seed")
    assert not (tmp_path / "runs").exists()


def _damaged_run(tmp_path: Path) -> Path:
    """A real run folder: a short fault-free run of the trainer through the runner."""
    path = write_scenario(tmp_path, "tiny", world_size=1, launcher="torchrun", trainer={"train.train_iters": 3},
                          expect={"exit_code": 0, "completed_steps": 3})
    result = chaos("run", str(path), "--out", str(tmp_path / "runs"), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    return run_dir


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _damaged_run(tmp_path_factory.mktemp("real-run"))


def _copy(run_dir: Path, dest: Path) -> Path:
    subprocess.run(["cp", "-r", str(run_dir), str(dest)], check=True)
    return dest


def test_judge_of_an_intact_run_passes(real_run: Path, tmp_path: Path) -> None:
    copy = _copy(real_run, tmp_path / "run")
    result = chaos("judge", str(copy), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_judge_of_a_garbled_scenario_copy_is_one_line(real_run: Path, tmp_path: Path) -> None:
    copy = _copy(real_run, tmp_path / "run")
    (copy / "scenario.yaml").write_text("name: [unclosed\n  world_size: 2\n")
    one_line_error(chaos("judge", str(copy), cwd=tmp_path), "scenario.yaml")


def test_judge_of_non_utf8_events_names_the_file_and_line(real_run: Path, tmp_path: Path) -> None:
    copy = _copy(real_run, tmp_path / "run")
    events = copy / "events" / "rank-0.jsonl"
    lines = events.read_bytes().splitlines(keepends=True)
    events.write_bytes(b"".join([lines[0], b'{"event": "step", "caf\xe9\xff": 1}\n', *lines[1:]]))
    one_line_error(chaos("judge", str(copy), cwd=tmp_path), "rank-0.jsonl:2")


def test_judge_of_an_event_without_rank_names_the_file_and_line(real_run: Path, tmp_path: Path) -> None:
    copy = _copy(real_run, tmp_path / "run")
    events = copy / "events" / "rank-0.jsonl"
    lines = events.read_text().splitlines(keepends=True)
    broken = json.loads(lines[2])
    del broken["rank"]
    lines[2] = json.dumps(broken) + "\n"
    events.write_text("".join(lines))
    one_line_error(chaos("judge", str(copy), cwd=tmp_path), "rank-0.jsonl:3", "rank")


def test_a_batch_the_trainer_refuses_is_refused_by_validate(tmp_path: Path) -> None:
    path = write_scenario(tmp_path, "bad_batch", trainer={"train.global_batch_size": 6, "train.micro_batch_size": 2})
    one_line_error(chaos("validate", str(path), cwd=tmp_path), "global_batch_size")
    one_line_error(chaos("run", str(path), "--out", str(tmp_path / "runs"), cwd=tmp_path), "global_batch_size")
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_failed_baseline_is_a_clear_error_with_its_log(tmp_path: Path) -> None:
    """The rerun state machine's own error injection also fires in the fault-free run: it exits 17."""
    trainer = {
        "train.train_iters": 8, "rerun_state_machine.rerun_mode": "validate_results",
        "rerun_state_machine.error_injection_rate": 1, "rerun_state_machine.error_injection_type": "transient_error",
    }
    path = write_scenario(tmp_path, "bad_baseline", world_size=1, launcher="torchrun", max_restarts=0, trainer=trainer,
                          expect={"baseline": "exact"})
    result = chaos("run", str(path), "--out", str(tmp_path / "runs"), cwd=tmp_path)
    assert result.returncode in (1, 2), result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert "baseline" in (result.stdout + result.stderr).lower()


def test_a_gpu_scenario_on_a_cpu_machine_is_refused_before_launching(tmp_path: Path) -> None:
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA GPUs")
    except ImportError:
        pass
    one_line_error(chaos("run", "straggler_gpu", "--out", str(tmp_path / "runs"), cwd=tmp_path), "GPU")
    assert not (tmp_path / "runs").exists()


def test_validate_reports_every_problem_of_a_file(tmp_path: Path) -> None:
    path = write_scenario(tmp_path, "many_problems", world_size=2, max_restarts=-1, seed="x",
                          faults=[{"type": "rank_killed", "rank": 7, "at_step": 3}])
    result = chaos("validate", str(path), cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    for field in ("max_restarts", "seed", "faults[0].rank"):
        assert field in result.stderr, (field, result.stderr)


def test_a_huge_scenario_file_is_refused_by_its_size(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with open(path, "w") as f:
        f.write("name: huge\ndescription: x\nworld_size: 2\ntrainer:\n")
        for i in range(600_000):
            f.write(f"  k{i}: {i}\n")
    assert path.stat().st_size > 8 << 20
    one_line_error(chaos("validate", str(path), cwd=tmp_path, timeout=60), "huge.yaml")


# Found beyond the list: every subcommand with missing or garbled files, folders that are not run
# folders, bad numbers. Each was a traceback, or silence, before.
@pytest.mark.parametrize(
    "args, named",
    [
        (("run", "rank_killed", "--repeat", "0"), "--repeat"),
        (("run", "rank_killed", "--seed", "x"), "--seed"),
        (("run", "rank_killed", "--seed", "1", "--repeat", "2"), "--repeat"),
        (("frobnicate",), "frobnicate"),
        (("run",), "scenario"),
        (("slurm", "rank_killed", "--seed", "-3"), "--seed"),
        (("correlate", "a", "b", "--rtol", "lots"), "--rtol"),
        (("judge", "no-such-folder"), "no-such-folder"),
        (("replay", "no-such-journal.json"), "no-such-journal.json"),
        (("validate", "/dev/zero"), "/dev/zero"),
        (("slurm", "rank_killed", "--out", "/proc/forbidden"), "/proc/forbidden"),
    ],
    ids=["repeat-0", "seed-not-a-number", "seed-and-repeat", "unknown-command", "no-scenario", "slurm-seed",
         "rtol-not-a-number", "judge-missing", "replay-missing", "validate-endless-file", "slurm-unwritable"],
)
def test_a_bad_argument_or_path_is_one_line(tmp_path: Path, args: tuple[str, ...], named: str) -> None:
    one_line_error(chaos(*args, cwd=tmp_path), named)


def test_an_out_folder_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "runs").write_text("a file\n")
    one_line_error(chaos("run", "rank_killed", "--out", str(tmp_path / "runs"), cwd=tmp_path), "runs")


def test_judge_of_a_folder_that_is_not_a_run_folder_is_one_line(tmp_path: Path) -> None:
    one_line_error(chaos("judge", str(tmp_path), cwd=tmp_path), "not a run folder")


@pytest.mark.parametrize(
    "damage, named",
    [
        (lambda run: (run / "plan.json").write_text('{"faults": 5}\n'), "plan.json: not a fault plan"),
        (lambda run: (run / "events" / "rank-7.jsonl").mkdir(), "rank-7.jsonl: cannot read (Is a directory)"),
        (lambda run: (run / "scenario.yaml").write_bytes(b"\xff\xfe"), "scenario.yaml: not a text file"),
        (lambda run: (run / "scenario.yaml").write_text("name: tiny\nworld_size: 0\n"), "scenario.yaml: description: required"),
    ],
    ids=["garbled-plan", "unreadable-events", "binary-scenario", "invalid-scenario"],
)
def test_judge_of_a_damaged_run_folder_names_the_file(real_run: Path, tmp_path: Path, damage, named: str) -> None:
    copy = _copy(real_run, tmp_path / "run")
    damage(copy)
    result = chaos("judge", str(copy), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert named in result.stderr.splitlines()[0], result.stderr


def test_replay_of_a_file_that_is_not_a_journal_is_one_line(real_run: Path, tmp_path: Path) -> None:
    copy = _copy(real_run, tmp_path / "run")
    (copy / "journal.json").write_text("[1, 2]\n")
    one_line_error(chaos("replay", str(copy / "journal.json"), cwd=tmp_path), "journal.json: not a journal")


def test_output_into_a_closed_pipe_is_no_traceback(tmp_path: Path) -> None:
    piped = subprocess.run(
        f"{sys.executable} -m chaos list | head -1", shell=True, cwd=tmp_path, capture_output=True, text=True,
        env=chaos_env(),
    )
    assert piped.stderr == "" and piped.stdout.count("\n") == 1, piped.stderr


@pytest.mark.slow
def test_a_live_run_reports_a_line_that_is_not_an_event_and_the_judge_refuses_the_log(tmp_path: Path) -> None:
    """A command that writes a line into its rank's event log that is not an event: the progress view
    says so as it arrives (the run goes on), and the run is not judged from a log it could not read."""
    writer = tmp_path / "bad_writer.py"
    writer.write_text(
        "import os, sys\nos.makedirs(os.path.join(sys.argv[1], 'events'), exist_ok=True)\n"
        "open(os.path.join(sys.argv[1], 'events', 'rank-0.jsonl'), 'a').write('garbage\\n')\n"
        "print('step 1 loss 1.0', flush=True)\n"
    )
    path = write_scenario(tmp_path, "bad_writer", world_size=1, launcher="torchrun", max_restarts=0,
                          command=["python", str(writer), "{run_dir}"], step_pattern=r"^step (?P<step>\d+)")
    result = chaos("run", str(path), "--out", str(tmp_path / "runs"), cwd=tmp_path)
    (run_dir,) = (tmp_path / "runs").iterdir()
    bad = f"{run_dir.resolve() / 'events' / 'rank-0.jsonl'}:1: not JSON (Expecting value)"
    assert f"chaos: not an event (skipped): {bad}" in result.stdout, result.stdout
    one_line_error(result, "rank-0.jsonl:1: not JSON")


def test_judge_json_is_the_run_for_machines(real_run: Path, tmp_path: Path) -> None:
    copy = _copy(real_run, tmp_path / "run")
    result = chaos("judge", str(copy), "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert (record["scenario"], record["passed"], record["status"], record["run_dir"]) == ("tiny", True, "passed", str(copy))
    steps = next(v for v in record["verdicts"] if v["name"] == "completed_steps")
    assert (steps["observed"], steps["bounds"], steps["passed"]) == (3, {"min": 3, "max": 3}, True)
    assert record["metrics"]["completed_steps"] == 3 and "losses" not in record["metrics"]
    assert Path(record["journal"]).is_file() and Path(record["picture"]).is_file()


# --------------------------------------------------------------------------- 4. external trainers
STANDALONE = ROOT / "tests" / "functional" / "standalone" / "ddp_train.py"


def test_a_command_scenario_may_expect_resume_and_lost_steps(tmp_path: Path) -> None:
    path = write_scenario(
        tmp_path, "cmd_expect", launcher="ft_launcher", command=["python", str(STANDALONE), "--steps", "30"],
        step_pattern=r"^step (?P<step>\d+) loss (?P<loss>\S+)", faults=[{"type": "sigkill", "rank": 1, "at_step": 12}],
        expect={"resumed_from_step": 10, "lost_steps": {"max": 99}, "completed_steps": 30},
    )
    result = chaos("validate", str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr


def test_a_relative_command_path_is_the_scenario_folders_and_must_exist(tmp_path: Path) -> None:
    path = write_scenario(tmp_path, "cmd_missing", command=["python", "no_such_train.py"],
                          step_pattern=r"^step (?P<step>\d+)")
    one_line_error(chaos("validate", str(path), cwd=tmp_path), "no_such_train.py")


@pytest.mark.slow
def test_a_trainer_counting_iterations_per_epoch_is_followed_globally(tmp_path: Path) -> None:
    """`epoch: E iter: I` from 0 in every epoch of 8: the steps are global, so the kill at step 12 (epoch 1,
    iteration 3) fires, and the resume from the step-10 checkpoint reads as one."""
    path = write_scenario(
        tmp_path, "cmd_epochs", launcher="ft_launcher", max_restarts=1,
        command=["python", str(STANDALONE), "--steps", "24", "--epoch-size", "8", "--ckpt", "{run_dir}/ckpt.pt"],
        step_pattern=r"^epoch: (?P<epoch>\d+) iter: (?P<step>\d+) loss: (?P<loss>\S+)",
        faults=[{"type": "sigkill", "rank": 1, "at_step": 12}],
        expect={"exit_code": 0, "restarts": 1, "completed_steps": 24, "resumed_from_step": 10, "lost_steps": {"max": 5}},
    )
    result = chaos("run", str(path), "--out", str(tmp_path / "runs"), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    steps = [(e["attempt"], e["iteration"]) for e in _events(run_dir / "events" / "observed.jsonl")]
    first = [i for a, i in steps if a == 0]
    again = [i for a, i in steps if a == 1]
    assert first == list(range(1, len(first) + 1)) and first[-1] >= 12, steps
    assert again == list(range(11, 25)), steps


def test_goodput_is_not_observed_where_step_times_are_not(tmp_path: Path) -> None:
    lines = "print('step 1 loss 3.0'); print('step 2 loss 2.0')"
    path = write_scenario(tmp_path, "cmd_goodput", world_size=1, launcher="torchrun", command=["python", "-c", lines],
                          step_pattern=r"^step (?P<step>\d+) loss (?P<loss>\S+)",
                          expect={"completed_steps": 2, "goodput": {"min": 0.0}})
    result = chaos("run", str(path), "--out", str(tmp_path / "runs"), cwd=tmp_path, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "goodput: expected >= 0, observed not observed" in result.stdout, result.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert json.loads((run_dir / "journal.json").read_text())["metrics"]["goodput"] is None


FT_CLIENT = ROOT / "tests" / "functional" / "standalone" / "ft_client.py"


def test_a_commands_own_ft_config_is_the_launchers_and_its_learned_timeouts_stand(tmp_path: Path) -> None:
    """NVRx's own way: `--ft-cfg-path` beside the trainer. The launcher gets that file, the rank's argv
    loses the option, and timeouts the trainer learned and saved earlier (its ft_state) stand."""
    (tmp_path / "ft_cfg.yaml").write_text("fault_tolerance:\n  initial_rank_heartbeat_timeout: 41.5\n  rank_heartbeat_timeout: 17.5\n")
    (tmp_path / "ft_state.json").write_text(json.dumps(
        {"current_timeouts": {"heartbeat": {"initial": 12.25, "subsequent": 6.25, "were_calculated": True}}}
    ))
    path = write_scenario(
        tmp_path, "cmd_ft_cfg", world_size=1, launcher="ft_launcher", max_restarts=0,
        command=["python", str(FT_CLIENT), "--ft-cfg-path", "ft_cfg.yaml", "--ft-state", str(tmp_path / "ft_state.json")],
        step_pattern=r"^step (?P<step>\d+) loss (?P<loss>\S+)", expect={"exit_code": 0, "completed_steps": 1},
    )
    result = chaos("run", str(path), "--out", str(tmp_path / "runs"), cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    log = (run_dir / "launcher.log").read_text()
    assert "configured initial 41.5 subsequent 17.5" in log and "in force initial 12.25 subsequent 6.25" in log, log
    assert yaml.safe_load((run_dir / "ft.yaml").read_text())["fault_tolerance"]["rank_heartbeat_timeout"] == 17.5
    both = write_scenario(tmp_path, "cmd_ft_both", world_size=1, launcher="ft_launcher", ft={"rank_heartbeat_timeout": 3},
                          command=["python", str(FT_CLIENT), "--ft-cfg-path=ft_cfg.yaml"])
    one_line_error(chaos("validate", str(both), cwd=tmp_path), "ft.rank_heartbeat_timeout", "--ft-cfg-path")


# ----------------------------------------------------------------------------- 6. CLI conventions
def test_version_and_console_script(tmp_path: Path) -> None:
    result = chaos("--version", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.strip(), result.stderr
    script = Path(sys.executable).with_name("chaos")
    assert script.is_file(), "no `chaos` console script beside python"
    assert subprocess.run([str(script), "--version"], capture_output=True, text=True).stdout == result.stdout


def test_validate_json(tmp_path: Path) -> None:
    bad = write_scenario(tmp_path, "bad_rank", faults=[{"type": "rank_killed", "rank": 9, "at_step": 3}])
    result = chaos("validate", str(ROOT / "scenarios" / "rank_killed.yaml"), str(bad), "--json", cwd=tmp_path)
    assert result.returncode == 2
    report = json.loads(result.stdout)
    assert isinstance(report, (list, dict))
    assert "rank_killed.yaml" in result.stdout and "bad_rank.yaml" in result.stdout
    assert report == {"valid": False, "files": [
        {"file": str(ROOT / "scenarios" / "rank_killed.yaml"), "valid": True, "problems": []},
        {"file": str(bad), "valid": False, "problems": ["faults[0].rank: 9 is outside the world (world_size 2)"]},
    ]}
