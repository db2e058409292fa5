"""Shared builders of the test suites: scenarios, events and run folders.

Fixtures, not imports: ``make_scenario(**fields)`` (a valid two-rank scenario with the fields replaced),
``event(name, mono, rank=0, attempt=0, **fields)`` (one event as read back from a run folder), ``run_logs``
(a run folder whose event files tests write through the real writer), ``scenarios_dir`` (the catalogue), and
``checkout_strays`` (what a command under test added to the project's checkout).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["pytester"]  # the chaos pytest plugin's own tests run pytest in pytest

ROOT = Path(__file__).resolve().parent

BASE_SCENARIO: dict[str, Any] = {
    "schema_version": 1, "name": "t", "description": "d", "world_size": 2,
    "trainer": {"train.train_iters": 20, "checkpoint.save_interval": 5},
}


@pytest.fixture
def scenarios_dir() -> Path:
    return ROOT / "scenarios"


@pytest.fixture
def make_scenario() -> Callable[..., Any]:
    """A scenario from the two-rank base with `fields` replaced (validated: a bad field raises ScenarioError)."""
    from chaos.schema.loader import parse_scenario

    def build(**fields: Any) -> Any:
        return parse_scenario({**BASE_SCENARIO, **fields}, "t.yaml")

    return build


@pytest.fixture
def event() -> Callable[..., dict[str, Any]]:
    """One event as the reader returns it, with a chosen ``mono`` stamp."""

    def build(name: str, mono: float, rank: int = 0, attempt: int = 0, **fields: Any) -> dict[str, Any]:
        return {"event": name, "rank": rank, "attempt": attempt, "mono": mono, **fields}

    return build


class RunLogs:
    """Event logs of one run folder, written by the real writer (runlog.log.EventLog)."""

    def __init__(self, root: Path):
        self.root = root
        self._logs: list[Any] = []

    def log(self, source: str, rank: int, attempt: int = 0, node: str | None = None) -> Any:
        from runlog.log import EventLog

        log = EventLog(self.root, source, rank=rank, attempt=attempt, node=node)
        self._logs.append(log)
        return log

    def rank(self, rank: int, attempt: int = 0, node: str | None = None) -> Any:
        return self.log(f"rank-{rank}", rank, attempt, node)

    def runner(self, attempt: int = 0) -> Any:
        return self.log("launcher", -1, attempt)

    def close(self) -> None:
        for log in self._logs:
            log.close()


@pytest.fixture
def run_logs(tmp_path: Path) -> Iterator[RunLogs]:
    logs = RunLogs(tmp_path)
    try:
        yield logs
    finally:
        logs.close()


def _untracked() -> set[str]:
    """The checkout's untracked files (its chaos-runs/ is ignored)."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return {line[3:] for line in out.splitlines() if line.startswith("?? ")}


class CheckoutStrays:
    """The checkout's untracked files when the test began, to tell what a command under test added."""

    def __init__(self) -> None:
        self.before = _untracked()

    def added(self, mark: str) -> set[str]:
        """Files the checkout gained since, at its top or named with `mark` (as the command under test names
        its files) anywhere in it: files others add to the checkout meanwhile are no stray of this test's."""
        return {p for p in _untracked() - self.before if "/" not in p or mark in p}


@pytest.fixture
def checkout_strays() -> CheckoutStrays:
    return CheckoutStrays()
