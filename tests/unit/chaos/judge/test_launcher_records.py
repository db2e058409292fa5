"""ft_launcher's own records as evidence (NVRx 0.7): cycle records against the harness's attempts, progress
tracking's stop, the health checks before a rendezvous.

The run folders under tests/data/nvrx07 are real runs of NVRx 0.7.0's launcher over our trainer on CPU
(ft_no_progress_stop_w1 and ft_storage_healthcheck_stall_w1, Python 3.12, 2026-12-06): the CPU machines of
CI install only NVRx 0.4.1, so the launcher's files are judged here as it wrote them, by `chaos judge` as a
user runs it. remaining_listed and remaining_missed are runs of external_loader_leftovers_checked's script
with ft.check_remaining_processes on and a helper process of rank 0 (tests/functional/standalone/
loader_train.py --helper-mib): deaf to SIGTERM, so the launcher listed it, still dying after its SIGKILL;
in a session of its own (--helper-session), so the launcher neither killed nor listed it and the harness
found it at the next start.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.judge.launcher_records import (
    cycle_check,
    failed_health_check,
    progress_stop,
    read_cycle_records,
    remaining_check,
    remaining_processes,
    restart_time_saved_s,
)
from trainer import nvrx_compat

ROOT = Path(__file__).resolve().parents[4]
DATA = ROOT / "tests/data/nvrx07"


def judge(folder: Path) -> tuple[int, dict]:
    out = subprocess.run([sys.executable, "-m", "chaos", "judge", str(folder)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    journal = json.loads((folder / "journal.json").read_text())
    return out.returncode, {v["name"]: v for v in journal["verdicts"]}


@pytest.fixture
def stopped(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    shutil.copytree(DATA / "no_progress_stop", folder)
    return folder


def test_the_launcher_s_four_cycle_records_are_read_in_order() -> None:
    records = read_cycle_records(DATA / "no_progress_stop/nvrx")
    assert [r.cycle for r in records] == [0, 1, 2, 3]
    assert all(r.end and r.start < r.end and r.active_ranks == "0" for r in records)


def test_a_real_no_progress_stop_is_judged_with_its_cycles_exit_code_and_time_saved(stopped: Path) -> None:
    code, verdicts = judge(stopped)
    assert code == 0
    assert verdicts["stopped_for_no_progress"]["observed"] == 4
    assert verdicts["exit_code"]["observed"] == 75
    assert verdicts["restart_time_saved_s"]["observed"] > 5
    assert verdicts["launcher_cycle_records"]["passed"]
    assert verdicts["launcher_cycle_records"]["observed"].startswith("agree: launcher cycles 0, 1, 2, 3 (4)")


def test_a_cycle_record_missing_is_a_disagreement_reported_with_both_sides(stopped: Path) -> None:
    (stopped / "nvrx/cycle_info..0.2").unlink()
    code, verdicts = judge(stopped)
    cycles = verdicts["launcher_cycle_records"]
    assert code == 1 and not cycles["passed"]
    assert cycles["observed"] == (
        "DISAGREE: launcher cycles 0, 1, 3 (3), harness attempts 0, 1, 2, 3 (4); only the launcher's: none, "
        "only the harness's: [2]"
    )


def test_a_cycle_never_closed_or_unreadable_fails_the_verdict_and_says_which(tmp_path: Path) -> None:
    shutil.copytree(DATA / "no_progress_stop/nvrx", tmp_path / "nvrx")
    record = tmp_path / "nvrx/cycle_info..0.3"
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "cycle_end_time": ""}))
    agree, text = cycle_check(tmp_path / "nvrx", [0, 1, 2, 3])
    assert not agree and text.endswith("cycle(s) [3] never closed (no cycle_end_time)")
    record.write_text("{not json")
    agree, text = cycle_check(tmp_path / "nvrx", [0, 1, 2, 3])
    assert not agree and text.startswith("a cycle record cannot be read (cycle_info..0.3: JSONDecodeError")
    agree, text = cycle_check(tmp_path / "none", [0])
    assert not agree and text.startswith("no cycle record in")


def test_progress_tracking_lines_as_nvrx_0_7_logs_them() -> None:
    stop = progress_stop((DATA / "no_progress_stop/launcher.log").read_text())
    assert stop.progress == (0,) and stop.no_progress == (1, 2, 3) and stop.stopped and stop.iterations_reported
    assert stop.cycles_run == 4
    silent = progress_stop("progress_tracker.py:196 Progress tracking is enabled but no iterations are being reported.")
    assert not silent.iterations_reported and silent.cycles_run is None


def test_restart_time_saved_is_the_unused_restarts_times_the_mean_cycle() -> None:
    assert restart_time_saved_s(8, 3, 80.0) == 5 * 20.0
    assert restart_time_saved_s(3, 3, 80.0) == 0.0
    assert restart_time_saved_s(8, None, 80.0) is None


def test_a_failed_storage_health_check_is_named_and_explained_by_the_stall_before_it(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    shutil.copytree(DATA / "storage_healthcheck_stall", folder)
    assert failed_health_check((folder / "launcher.log").read_text()) == "Storage path health check"
    assert failed_health_check("Worker group FAILED") == "none"
    code, verdicts = judge(folder)
    assert code == 0, verdicts
    assert verdicts["health_check_failed"]["observed"] == "Storage path health check"
    assert verdicts["unexplained_failures"]["observed"] == "none"


@pytest.mark.skipif(nvrx_compat.LAUNCHER_FEATURES["cycle_info_dir"] <= nvrx_compat._MAJOR_MINOR, reason="NVRx 0.7's launcher is installed")
def test_under_nvrx_0_4_a_scenario_of_0_7_options_is_refused_naming_them() -> None:
    out = subprocess.run([sys.executable, "-m", "chaos", "run", "scenarios/ft_no_progress_stop_w1.yaml"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"error: ft_no_progress_stop_w1 sets ft.max_no_progress_cycles, ft.checkpoint_iteration_file, ft.no_restart_exit_code, "
        f"ft.cycle_info_dir, which NVRx {nvrx_compat.VERSION}'s ft_launcher lacks (NVRx 0.7 has it)"
    )


def test_a_known_failure_of_the_no_te_path_applies_only_where_te_is_absent(monkeypatch) -> None:
    """megatron_lm_distopt_resume's assertion sits on Megatron-Core's path for neither APEX nor TE: with TE
    installed the run is judged on its expectations alone."""
    from chaos.judge import run
    from chaos.schema.loader import load_scenario

    scenario = load_scenario(ROOT / "scenarios/megatron_lm_distopt_resume.yaml")
    assert scenario.known_failure.only_without == ["transformer-engine"]
    monkeypatch.setattr(run, "installed", lambda name: False)
    assert run.known_here(scenario)
    monkeypatch.setattr(run, "installed", lambda name: name == "transformer-engine")
    assert not run.known_here(scenario)
    assert not run.known_here(load_scenario(ROOT / "scenarios/bridge_simulate_fault_distopt.yaml"))


@pytest.mark.parametrize(("nvrx", "gpus", "known"), [("0.4.1", 0, False), ("0.7.0", 0, True), ("0.7.0", 1, True), ("0.7.0", 2, False)])
def test_the_in_process_known_failure_holds_under_0_7_with_fewer_gpus_than_local_ranks(monkeypatch, nvrx, gpus, known) -> None:
    """NVRx 0.7's Wrapper checks GPU LOCAL_RANK through NVML before a restart in place: two ranks on a node
    need two GPUs NVML sees (nvidia-smi's count stands for it), whatever device the ranks train on."""
    from chaos.judge import run
    from chaos.schema.loader import load_scenario

    scenario = load_scenario(ROOT / "scenarios/inprocess_exception.yaml")
    monkeypatch.setattr(run, "version", lambda name: nvrx)
    monkeypatch.setattr(run, "gpu_count", lambda: gpus)
    assert run.known_here(scenario) is known


def test_the_launcher_s_remaining_processes_warning_is_read_as_nvrx_0_7_logs_it() -> None:
    (report,) = remaining_processes((DATA / "remaining_listed/launcher.log").read_text())
    assert report.line == 53 and report.count == 1
    (helper,) = report.processes
    assert (helper.pid, helper.ppid, helper.pgid, helper.name, helper.status, helper.cmdline) == (
        24413, 1, 24409, "python", "running", "N/A")
    assert remaining_processes((DATA / "remaining_missed/launcher.log").read_text()) == []


def test_a_process_the_launcher_listed_dying_and_gone_by_the_next_start_agrees(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    shutil.copytree(DATA / "remaining_listed", folder)
    code, verdicts = judge(folder)
    remaining = verdicts["launcher_remaining_processes"]
    assert code == 0 and remaining["passed"], remaining
    assert remaining["observed"] == (
        "agree: launcher listed 24413 (python, running) in 1 warning(s); harness found none at 0 attempt start(s); "
        "seen by both: none; listed by the launcher, gone by the next start: 24413 (python, running); missed by the launcher: none"
    )


def test_a_leftover_outside_the_workers_process_groups_is_missed_by_the_launcher_and_reported(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    shutil.copytree(DATA / "remaining_missed", folder)
    code, verdicts = judge(folder)
    remaining = verdicts["launcher_remaining_processes"]
    assert code == 3 and not remaining["passed"]  # broken besides: the helper outlived the launch
    assert remaining["observed"] == (
        "DISAGREE: launcher listed none in 0 warning(s); harness found 24639 (python) at 1 attempt start(s); "
        "seen by both: none; listed by the launcher, gone by the next start: none; missed by the launcher: 24639 (python)"
    )
    assert not verdicts["processes_reaped"]["passed"]


def test_remaining_processes_seen_by_both_agree_and_a_cut_list_is_said() -> None:
    log = (DATA / "remaining_listed/launcher.log").read_text()
    found = [{"processes": [{"pid": 24413, "name": "python"}]}]
    agree, text = remaining_check(remaining_processes(log), found)
    assert agree and "seen by both: 24413 (python)" in text
    cut = log.replace("Found 1 remaining", "Found 21 remaining")
    agree, text = remaining_check(remaining_processes(cut), [{"processes": [{"pid": 7, "name": "pt_data_worker"}]}])
    assert not agree and text.startswith("DISAGREE (the launcher's list is cut): launcher listed 24413 (python, running) "
                                         "in 1 warning(s) and counted 20 more without listing them")


def test_a_known_failure_fixed_in_nvrx_0_7_applies_only_below_it(monkeypatch) -> None:
    """external_loader_leftovers burns restarts under 0.4.1 only: 0.7's launcher kills the leftover workers."""
    from chaos.judge import run
    from chaos.schema.loader import load_scenario

    scenario = load_scenario(ROOT / "scenarios/external_loader_leftovers.yaml")
    assert scenario.known_failure.only_without == ["nvidia-resiliency-ext>=0.7"]
    for installed, known in (("0.4.1", True), ("0.7.0", False), ("0.10.0rc1", False)):
        monkeypatch.setattr(run, "version", lambda name, v=installed: v)
        assert run.known_here(scenario) is known, installed
