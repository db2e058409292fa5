"""pytest plugin (registered as the `chaos` entry point): one test per scenario file, verdicts in JUnit.

Options: ``--scenario NAME`` (repeatable) selects scenarios, ``--scenario-dir`` points at the catalogue,
``--chaos-out`` keeps run folders somewhere chosen (and, at the end, summary.md and summary.json of the
session's runs). A test that requests the ``scenario_file`` fixture is parametrized over the selected files;
the ``run_scenario`` fixture runs one and returns its outcome; ``scenario_outcome`` runs the test's own at
set-up, where a broken run is an error rather than a failure. Each verdict becomes JUnit properties, so
``--junitxml`` carries its message and, each in a property of its own, the observed value, the bounds
expected and whether it passed (``verdict.<name>.observed``, ``.min``, ``.max``, ``.passed``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from chaos.schema.scenario import Scenario


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos", "chaos scenarios")
    group.addoption(
        "--scenario", action="append", default=[], dest="chaos_scenarios", metavar="NAME",
        help="run only this scenario (by name; repeatable)",
    )
    group.addoption(
        "--scenario-dir", default=None, dest="chaos_scenario_dir", metavar="DIR",
        help="folder of scenario files (default: <rootdir>/scenarios)",
    )
    group.addoption(
        "--chaos-out", default=None, dest="chaos_out", metavar="DIR",
        help="where run folders go, with summary.md at the end (default: pytest's temporary folder)",
    )
    group.addoption(
        "--chaos-device", default=None, choices=("cpu", "cuda"), dest="chaos_device",
        help="run every scenario's trainer on this device (cuda: NCCL, one GPU per rank); default: the recipe's",
    )


def pytest_configure(config: pytest.Config) -> None:
    """A wrong --scenario or --scenario-dir is a usage error before collection (pytest prints its one line;
    raised while collecting, it came with a traceback)."""
    if config.getoption("chaos_scenarios") or config.getoption("chaos_scenario_dir"):
        selected_scenarios(config)


def _scenario_dir(config: pytest.Config) -> Path:
    chosen = config.getoption("chaos_scenario_dir")
    folder = Path(chosen) if chosen else config.rootpath / "scenarios"
    if not folder.is_dir():
        raise pytest.UsageError(f"--scenario-dir: {folder} is not a folder")
    return folder


def selected_scenarios(config: pytest.Config) -> list[Path]:
    """The scenario files to run; an unknown --scenario name is a usage error listing the known ones."""
    from chaos.schema.loader import scenario_files

    files = scenario_files(_scenario_dir(config))
    wanted = config.getoption("chaos_scenarios")
    if not wanted:
        return files
    by_name = {f.stem: f for f in files}
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        raise pytest.UsageError(f"--scenario: unknown {', '.join(unknown)}; known: {', '.join(sorted(by_name))}")
    return [by_name[n] for n in wanted]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "scenario_file" in metafunc.fixturenames:
        from chaos.schema.loader import load_scenario

        files = selected_scenarios(metafunc.config)
        params = [
            pytest.param(f, id=f.stem, marks=[pytest.mark.gpu] if load_scenario(f).requires == "gpu" else [])
            for f in files
        ]
        metafunc.parametrize("scenario_file", params)


def slot_file(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """The lock file the xdist workers of this session share (their base temp folders' parent), or None
    without xdist: one process runs one scenario at a time."""
    session = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    return None if session is None else tmp_path_factory.getbasetemp().parent / f"chaos-machine-{session}.lock"


def no_reclaim_wait(scenario: Scenario) -> Scenario:
    """The scenario without ft_launcher's wait for the node's GPUs to empty, unless it sets one.

    ft_launcher 0.5+ waits after stopping workers until the node's GPUs hold almost nothing. Runs packed onto
    the same GPUs (``-n N`` on cuda) never let that happen, so each restart waited out the timeout (38 s
    seen); runs on CPU (``--chaos-device=cpu`` on a GPU machine) hold no GPU memory, and waited for whatever
    else the GPUs held (25-50 s a restart beside a GPU benchmark, 1x H100, 2026-12-06). ft.yaml in the run
    folder shows the value used.
    """
    if scenario.ft.gpu_memory_reclaim_timeout is not None:
        return scenario
    return scenario.replace(ft={**scenario.ft.model_dump(), "gpu_memory_reclaim_timeout": 0.0})


@contextlib.contextmanager
def machine_slot(lock_path: Path | None, alone: bool) -> Iterator[None]:
    """Share the machine with the session's other scenario runs, or (``alone``) wait until it is free.

    A shared/exclusive flock on one file: under ``-n N`` a timing-judged scenario waits for the runs in
    flight to finish, and the others wait while it runs.
    """
    if lock_path is None:
        yield
        return
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture
def run_scenario(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, record_property: Callable
) -> Callable:
    """Run a scenario file; returns the RunOutcome and records each verdict as a JUnit property."""
    from chaos.judge.run import known_here
    from chaos.schema.loader import load_scenario
    from chaos.supervise.runner import on_device, unrunnable
    from chaos.supervise.runner import run_scenario as run

    chosen = request.config.getoption("chaos_out")
    out = Path(chosen) if chosen else tmp_path_factory.mktemp("chaos-runs")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")

    def progress(line: str) -> None:
        # Live progress on the terminal (not under xdist workers, which have no terminal).
        if reporter is not None and capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line(line)

    device = request.config.getoption("chaos_device")
    slots = slot_file(tmp_path_factory)

    def _run(path: Path, **kwargs):
        scenario = load_scenario(path)
        reason = unrunnable(scenario, device)
        if reason:
            pytest.skip(reason)
        scenario, alone = on_device(scenario, device), scenario.runs_alone
        if device == "cpu" or (device == "cuda" and slots is not None and not alone):
            scenario = no_reclaim_wait(scenario)
        with machine_slot(slots, alone=alone):
            outcome = run(scenario, out, scenario_file=path, progress=progress, device=device, **kwargs)
        for name, value in junit_properties(outcome.journal):
            record_property(name, value)
        record_property("run_dir", str(outcome.run_dir))
        progress(outcome.summary)
        if known_here(scenario) and outcome.passed:
            pytest.xfail(f"known failure, as catalogued: {scenario.known_failure.reason}")
        return outcome

    return _run


@pytest.fixture
def scenario_outcome(scenario_file: Path, run_scenario: Callable) -> object:
    """The judged run of ``scenario_file``, run while the test is set up, so that pytest tells the two ways
    a scenario goes wrong apart: a broken run (an unexplained failure, a fault that never came due: the
    run cannot show a recovery) is the test's ERROR, and a resiliency failure (the stack got its faults and
    did not recover as expected) is left to the test to FAIL."""
    outcome = run_scenario(scenario_file)
    if outcome.journal["status"] == "broken":
        pytest.fail(f"broken run, not a resiliency verdict:\n{outcome.summary}", pytrace=False)
    return outcome


def junit_properties(journal: dict) -> list[tuple[str, object]]:
    """Each verdict as JUnit properties: its message, and its values one per property, so that a dashboard
    reads numbers: ``verdict.<name>.observed``, ``.min`` and ``.max`` (a numeric expectation's bounds),
    ``.passed``."""
    found: list[tuple[str, object]] = []
    for v in journal["verdicts"]:
        key = f"verdict.{v['name']}"
        found += [(key, v["message"]), (f"{key}.observed", v["observed"])]
        found += [(f"{key}.{bound}", value) for bound, value in (v.get("bounds") or {}).items()]
        found.append((f"{key}.passed", "true" if v["passed"] else "false"))
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With --scenario, run just those scenarios: deselect the tests that run no scenario file."""
    if not config.getoption("chaos_scenarios"):
        return
    keep = [i for i in items if "scenario_file" in getattr(i, "fixturenames", ())]
    dropped = [i for i in items if i not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_sessionstart(session: pytest.Session) -> None:
    import time

    session.config.stash[_STARTED] = time.time()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """A table of this session's runs (from their journals, so it works under xdist), also as summary.md,
    and their records for machines as summary.json (``run_record`` each, in the order of the table)."""
    from chaos.judge.report import run_record, summary_table

    out = config.getoption("chaos_out")
    if not out or _STARTED not in config.stash:
        return
    journals = [
        p for p in sorted(Path(out).glob("*/journal.json")) if p.stat().st_mtime >= config.stash[_STARTED]
    ]
    if not journals:
        return
    table = summary_table(journals)
    (Path(out) / "summary.md").write_text(table + "\n")
    records = [run_record(json.loads(p.read_text())) for p in journals]
    summary = {"passed": sum(r["passed"] for r in records), "failed": sum(not r["passed"] for r in records), "runs": records}
    (Path(out) / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    terminalreporter.write_sep("=", "chaos scenarios")
    terminalreporter.write_line(table)


_STARTED = pytest.StashKey[float]()
