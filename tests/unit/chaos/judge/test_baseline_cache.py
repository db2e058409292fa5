"""The baseline cache (chaos/judge/baseline.py): each baseline run gets a folder of its own name, since the
folder's name is the run's marker, by which the runner finds and kills what a run leaves behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.judge.baseline import ensure_baseline
from runlog.layout import RunFolder


def _completes(folders: list[Path]):
    def run(_scenario, folder: Path) -> None:
        folders.append(folder)
        RunFolder(folder).final_weights.write_bytes(b"weights")

    return run


def test_two_caches_run_the_same_baseline_under_different_markers(make_scenario, tmp_path, monkeypatch):
    """Two sessions (two GPU suites on one machine) with caches of their own computed the same config's
    baseline at once; both run folders were <key>.partial, so each run's leftover sweep killed the other's
    processes (seen on 1x H200: 'launcher exit -9' and 'processes left behind' in the two baselines)."""
    scenario, folders = make_scenario(), []
    for cache in ("a", "b"):
        monkeypatch.setenv("CHAOS_CACHE_DIR", str(tmp_path / cache))
        done = ensure_baseline(scenario, _completes(folders))
        assert done.name == folders[-1].name.split(".partial-")[0] and RunFolder(done).final_weights.is_file()
    assert folders[0].name != folders[1].name
    assert all(".partial-" in f.name for f in folders)


def test_a_dead_runners_partial_baseline_is_cleared_before_the_next(make_scenario, tmp_path, monkeypatch):
    monkeypatch.setenv("CHAOS_CACHE_DIR", str(tmp_path))
    scenario, folders = make_scenario(), []

    def dies(_scenario, folder: Path) -> str:
        folders.append(folder)
        return "launcher exit -9"

    with pytest.raises(Exception, match="launcher exit -9"):
        ensure_baseline(scenario, dies)
    ensure_baseline(scenario, _completes(folders))
    assert not folders[0].exists() and [p.name for p in tmp_path.glob("*.partial*")] == []
