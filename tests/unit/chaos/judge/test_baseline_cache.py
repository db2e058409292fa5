"""The baseline cache (chaos/judge/baseline.py): each baseline run gets a folder of its own name, since the
folder's name is the run's marker, by which the runner finds and kills what a run leaves behind."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from chaos.judge.baseline import (
    CACHE_VAR,
    PROJECT_ROOT,
    TRAINER_SOURCE,
    cache_dir,
    cached_baseline,
    default_cache_dir,
    ensure_baseline,
    source_digest,
)
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


def test_the_cache_is_the_users_not_the_current_folders(make_scenario, tmp_path, monkeypatch):
    """`chaos judge` run from another folder finds the baselines: they live in the user's cache folder (XDG's,
    else ~/.cache), or in $CHAOS_CACHE_DIR; nothing is written into the current folder."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("CHAOS_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "chaos-harness" / "baselines"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "chaos-harness" / "baselines"

    scenario, folders = make_scenario(), []
    assert cached_baseline(scenario) is None
    done = ensure_baseline(scenario, _completes(folders))
    assert done.parent == tmp_path / "xdg" / "chaos-harness" / "baselines" and cached_baseline(scenario) == done
    assert list(elsewhere.iterdir()) == []
    ensure_baseline(scenario, _completes(folders))
    assert len(folders) == 1  # cached: not run again
    monkeypatch.setenv("CHAOS_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine" and cached_baseline(scenario) is None


def test_a_trainer_that_changed_has_baselines_of_its_own(tmp_path):
    """Checkouts share the user's cache: the key covers the trainer's and the contract's source."""
    for package in TRAINER_SOURCE:
        shutil.copytree(PROJECT_ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    assert source_digest.__wrapped__(tmp_path) == source_digest(PROJECT_ROOT)
    step = tmp_path / "trainer" / "loop.py"
    step.write_text(step.read_text() + "\n# a changed trainer\n")
    assert source_digest.__wrapped__(tmp_path) != source_digest(PROJECT_ROOT)


def test_the_docs_say_where_the_cache_is(monkeypatch):
    """README and docs/scenarios.md name the variable and the default folder the code uses."""
    monkeypatch.setenv("XDG_CACHE_HOME", "/XDG")
    tail = str(default_cache_dir().relative_to("/XDG"))
    for doc in ("README.md", "docs/scenarios.md"):
        text = (PROJECT_ROOT / doc).read_text()
        assert f"${CACHE_VAR}" in text and f"~/.cache/{tail}" in text, doc


def test_every_scenario_judged_against_a_baseline_has_a_fault_free_run_that_validates() -> None:
    """The fault-free run expects nothing, so it keeps nothing that names an expectation (a known failure's
    verdicts): inprocess_then_killed's baseline broke on the device for want of this."""
    from chaos.judge.baseline import fault_free
    from chaos.schema.loader import load_scenario

    judged = [s for p in sorted((PROJECT_ROOT / "scenarios").glob("*.yaml")) if (s := load_scenario(p)).expect.baseline]
    assert any(s.known_failure for s in judged)
    for scenario in judged:
        baseline = fault_free(scenario)
        assert baseline.faults == [] and baseline.known_failure is None, scenario.name
