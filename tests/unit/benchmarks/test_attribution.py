"""`python -m benchmarks attribution` over a run folder written by the real writers (a rank_hung_sections run
as it happened: the rank monitor named rank 0, the rank that waited), as a subprocess on real files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from runlog.layout import RunFolder
from runlog.log import EventLog
from runlog.records import FaultInjected, FtTimeout, LauncherExit, Restart, RunStart

ROOT = Path(__file__).resolve().parents[3]
LINE = "[2026-12-06 04:04:56,846] [WARNING] [RankMonServer19282@vm:0] Section 'step' has been open for 3.70 seconds."


def _run_folder(root: Path) -> Path:
    run = root / "rank_hung_sections-20261206-040625-15703e"
    run.mkdir(parents=True)
    shutil.copy(ROOT / "scenarios" / "rank_hung_sections.yaml", RunFolder(run).scenario)
    ranks = [EventLog(run, f"rank-{r}", r, attempt=0, node="vm") for r in (0, 1)]
    launcher = EventLog(run, "launcher", -1, attempt=0, node="vm")
    for log in ranks:
        log.write(RunStart("d", 2, "gloo", "cpu", "ft_launcher", 12, {}))
    ranks[1].write(FaultInjected("rank_hung", "f0", "SIGSTOP", 7, target_rank=1))
    launcher.write(FtTimeout(LINE))
    launcher.write(Restart("Worker group FAILED. 3/3 attempts left; will restart worker group", 3))
    launcher.write(LauncherExit(0))
    for log in (*ranks, launcher):
        log.close()
    return run


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "benchmarks", "attribution", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)


def test_the_table_counts_the_rank_monitor_wrong_and_the_restart_right(tmp_path: Path):
    _run_folder(tmp_path / "runs")
    done = _bench("--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert "| rank_hung | rank_monitor | 0 | 1 | 0 | 0 | - | rank_hung_sections |" in done.stdout
    assert "| rank_hung_sections | rank_hung | restart | restart | the launcher restarted the workers | right |" in done.stdout
    written = json.loads((tmp_path / "out" / "attribution.json").read_text())
    assert [(r["fault"], r["source"], r["wrong"]) for r in written["sources"]] == [("rank_hung", "rank_monitor", 1)]
    assert not (RunFolder(tmp_path / "runs" / "rank_hung_sections-20261206-040625-15703e").event_file("culprit")).exists()


def test_a_folder_without_runs_is_a_one_line_error(tmp_path: Path):
    done = _bench("--runs", str(tmp_path))
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].endswith(f"no run folder with a targeted fault under {tmp_path}")
