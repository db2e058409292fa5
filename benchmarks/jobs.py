"""The main job and the functional suite as a user and CI run them, through nox (issue 18).

Both run in this checkout and, with ``--before DIR``, in a checkout of an earlier commit, interleaved in one
benchmark run, so that "before" and "after" come from the same machine at the same time:

- the main job, ``nox -s functional -- --scenario rank_killed``, with a cold baseline cache (a fresh
  ``CHAOS_CACHE_DIR``) and then a warm one (the same folder again), beside its floor: the span from the
  launch to the launcher's exit of the faulted job with its restart, read from the run's own events;
- the suite, ``nox -s functional`` over the whole catalogue with a cold cache: serial, and on two
  pytest-xdist workers (``-n 2``); with ``--before``, the earlier checkout's catalogue serially as its CI
  ran it, beside this one's ``-n 2``, and this one's ``-n 2`` over the earlier checkout's tests alone.

Each session's CPU is read too (all of its process tree): over the machine's cores, it is the least wall
time the same work can take here. A checkout's first nox session builds its venv, so each is warmed up by an
untimed session first.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

from benchmarks.catalogue import run_times, totals
from benchmarks.points import PROJECT_ROOT
from benchmarks.runs import BenchmarkFailed
from chaos.judge.timeline import compute_metrics
from chaos.schema.loader import scenario_files
from runlog.reader import read_events

Row = dict[str, Any]

SCENARIO = "rank_killed"
JOB_TIMEOUT_S = 900
SUITE_TIMEOUT_S = 3 * 3600
CORES = os.cpu_count() or 1


def label(root: Path) -> str:
    """``now`` or ``before (<short commit>)``: what a row's checkout is."""
    if root == PROJECT_ROOT:
        return "now"
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return f"before ({commit.stdout.strip() or root})"


def _nox() -> str:
    found = shutil.which("nox")
    if found is None:
        raise BenchmarkFailed("the main job and the suite run through nox, which is not on PATH: pip install nox")
    return found


class Session(NamedTuple):
    seconds: float
    cpu_s: float
    """User + system CPU of the session's whole process tree: nox, pytest, its workers, the runs' launchers and
    ranks (every process the tree waited for; a process orphaned by a killed agent is not counted). On a
    machine of N cores, cpu_s / N is the least wall time the same work can take."""
    code: int
    tail: str


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _session(root: Path, cache: Path, posargs: list[str], timeout: float) -> Session:
    """One ``nox -s functional -- POSARGS`` in ``root`` with ``cache`` as the baseline cache. The
    benchmark's own venv and cache are left out of its environment: each checkout's nox makes its own."""
    argv = [_nox(), "-s", "functional", "--", *posargs]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CHAOS_CACHE_DIR", "PYTHONPATH")}
    start, cpu = time.monotonic(), _children_cpu()
    proc = subprocess.run(argv, cwd=root, env={**env, "CHAOS_CACHE_DIR": str(cache)}, capture_output=True, text=True,
                          timeout=timeout)
    return Session(time.monotonic() - start, _children_cpu() - cpu, proc.returncode, (proc.stdout + proc.stderr)[-600:])


def _job(root: Path, cache: Path, posargs: list[str]) -> Session:
    """A session that must pass (the main job, a warm-up), or BenchmarkFailed."""
    session = _session(root, cache, posargs, JOB_TIMEOUT_S)
    if session.code != 0:
        raise BenchmarkFailed(f"nox -s functional -- {' '.join(posargs)} in {root} exited {session.code}: {session.tail}")
    return session


def launcher_span(root: Path) -> float | None:
    """Launch to launcher exit (the timeline's ``wall_s``) of the newest ``rank_killed`` run folder under
    ``root/chaos-runs``."""
    folders = sorted((root / "chaos-runs").glob(f"{SCENARIO}-*"), key=lambda p: p.stat().st_mtime)
    return compute_metrics(read_events(folders[-1])).wall_s if folders else None


def main_job(roots: list[Path], reps: int, work: Path) -> list[Row]:
    """Cold and warm main jobs per checkout, interleaved ``reps`` times; medians, the ratio to the floor, and
    the cold job's CPU over the machine's cores (the least wall time its work can take here)."""
    keys = ("cold_s", "cold_cpu_s", "warm_s", "floor_s")
    times: dict[Path, dict[str, list[float]]] = {r: {k: [] for k in keys} for r in roots}
    job = ["--scenario", SCENARIO]
    for root in roots:
        _job(root, work / "warm-up", job)
    for rep in range(reps):
        for index, root in enumerate(roots):
            cache = work / f"cache-{rep}-{index}"
            cold = _job(root, cache, job)
            times[root]["cold_s"].append(cold.seconds)
            times[root]["cold_cpu_s"].append(cold.cpu_s)
            times[root]["warm_s"].append(_job(root, cache, job).seconds)
            span = launcher_span(root)
            if span is not None:
                times[root]["floor_s"].append(span)
    rows = []
    for root in roots:
        row: Row = {"checkout": label(root)}
        row.update({k: statistics.median(v) if v else None for k, v in times[root].items()})
        row["warm_per_floor"] = row["warm_s"] / row["floor_s"] if row["floor_s"] else None
        row["cold_cpu_per_core_s"] = row["cold_cpu_s"] / CORES
        rows.append(row)
    shutil.rmtree(work, ignore_errors=True)
    return rows


def functional_tests(root: Path) -> set[str]:
    """Checkout ``root``'s functional tests, as the node-id prefixes pytest's ``--deselect`` takes: each test
    function (``tests/functional/<file>::<function>``, all its cases) and each scenario of its catalogue
    (``tests/functional/test_scenarios.py::test_scenario[<name>]``), read from the checkout's files."""
    tests = {
        f"tests/functional/{f.name}::{name}"
        for f in (root / "tests" / "functional").glob("test_*.py")
        for name in re.findall(r"^def (test_\w+)", f.read_text(), re.MULTILINE)
        if name != "test_scenario"
    }
    scenarios = scenario_files(root / "scenarios")  # what the pytest plugin parametrizes test_scenario over
    return tests | {f"tests/functional/test_scenarios.py::test_scenario[{p.stem}]" for p in scenarios}


def suite(roots: list[Path]) -> list[Row]:
    """The whole catalogue with cold baselines: this checkout serial and ``-n 2``, or, given an earlier
    checkout (``roots[0]``), that one serial as its CI ran it beside this one's ``-n 2``, and this one's
    ``-n 2`` over the earlier checkout's tests alone (the others deselected): the same tests in both.
    A failing test is a row's exit code, not the end of the benchmark."""
    first = roots[0] if len(roots) > 1 else PROJECT_ROOT
    runs = [(first, "serial", []), (PROJECT_ROOT, "-n 2", ["-n", "2"])]
    if first != PROJECT_ROOT:
        added = sorted(functional_tests(PROJECT_ROOT) - functional_tests(first))
        runs.append((PROJECT_ROOT, f"-n 2, the tests of {label(first)}", ["-n", "2", *(f"--deselect={t}" for t in added)]))
    rows = [_suite_row(root, mode, extra) for root, mode, extra in runs]
    for row in rows[1:]:
        row["per_first"] = row["seconds"] / rows[0]["seconds"]
    return rows


def _suite_row(root: Path, mode: str, extra: list[str]) -> Row:
    """One catalogue run with a fresh baseline cache: wall, CPU, and where its runs' time went."""
    with tempfile.TemporaryDirectory(prefix="chaos-bench-suite-") as cache:
        _job(root, Path(cache), ["--collect-only", "-q"])
        since = time.time()
        session = _session(root, Path(cache), ["-q", *extra], SUITE_TIMEOUT_S)
        split = totals(run_times([root / "chaos-runs"], [Path(cache)], since))
    row = {
        "checkout": label(root), "mode": mode, "seconds": session.seconds, "exit_code": session.code,
        "cpu_s": session.cpu_s, "cores_busy": session.cpu_s / session.seconds, "cpu_per_core_s": session.cpu_s / CORES,
    }
    for part in split:  # where the time of its scenario runs and baselines went (benchmarks/catalogue.py)
        row.update({f"{part['runs']}_{k}": v for k, v in part.items() if k.endswith("_s") or k == "count"})
    return row
