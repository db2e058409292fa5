"""The coverage table (benchmarks/coverage.py): every setting of the trainer's config has a row or a reason,
and docs/coverage.md holds what the code generates."""

from __future__ import annotations

import subprocess
import sys

from benchmarks import coverage


def test_every_setting_of_the_config_has_a_row_or_a_reason():
    assert coverage.unclassified() == []


def test_a_new_setting_without_a_row_is_named():
    keys = [*coverage.config_keys(), "checkpoint.keep_every_nth", "ft.new_timeout"]
    assert coverage.unclassified(keys) == [
        "checkpoint.keep_every_nth: no row in benchmarks/coverage.py SETTINGS and no reason in NOT_UNDER_FAULT",
        "ft.new_timeout: no row in benchmarks/coverage.py SETTINGS and no reason in NOT_UNDER_FAULT",
    ]
    assert coverage.unclassified([k for k in coverage.config_keys() if k != "checkpoint.most_recent_k"]) == [
        "checkpoint.most_recent_k: not a setting of the trainer's config"]


def test_the_doc_is_what_the_code_generates():
    doc = coverage.DOC.read_text()
    assert coverage.spliced(doc, coverage.generate()) == doc, "docs/coverage.md is stale: python -m benchmarks coverage --write"


def test_the_command_prints_the_table():
    out = subprocess.run([sys.executable, "-m", "benchmarks", "coverage"], cwd=coverage.ROOT, capture_output=True, text=True, check=True)
    assert "| `checkpoint.most_recent_k` |" in out.stdout
    assert out.stdout.strip() == coverage.generate()


def test_every_gap_states_why_it_is_left():
    assert coverage.open_gaps(coverage.rows([*coverage.catalogue_sources(), *coverage.explore_sources()])) == []
