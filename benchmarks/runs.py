"""Run benchmark points through the chaos runner and keep what their events say.

A point is launched exactly as ``python -m chaos run`` launches a scenario (``chaos.supervise.runner.execute``), but
not judged: no verdicts, no fault-free baseline, only the event log. Each distinct point runs ``reps``
times, once however many sections ask for it; checkpoints are deleted after each run (only events count).
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.judge.timeline import Metrics, load_run
from chaos.schema.loader import parse_scenario
from chaos.supervise.runner import execute, new_run_dir
from runlog.reader import read_events

Event = dict[str, Any]


class BenchmarkFailed(RuntimeError):
    """A process the benchmark ran to measure it failed: the message says which and shows its output's end.
    ``python -m benchmarks`` prints it as one line and exits 1, keeping the sections it had measured."""


@dataclass(frozen=True)
class Sample:
    """One run of a point: its events and chaos.judge.timeline's metrics of them."""

    run_dir: Path
    events: list[Event]
    metrics: Metrics
    seconds: float
    """Wall time of the whole run as the benchmark saw it (launch to reaped)."""


class PointRunner:
    """Measures points, each distinct one once (``reps`` runs), in the order they are first asked for."""

    def __init__(self, out_dir: Path, reps: int, log: Callable[[str], None] = print):
        self.out_dir, self.reps, self.log = out_dir, reps, log
        self._done: dict[str, list[Sample]] = {}

    def samples(self, data: dict[str, Any]) -> list[Sample]:
        self.measure([data])
        return self._done[_key(data)]

    def measure(self, points: list[dict[str, Any]]) -> None:
        """Run the points not measured yet, interleaved (rep 1 of each, then rep 2...), so that a change in
        the machine's load during the section falls on every point alike and the ratios stay fair."""
        pending = list({_key(p): p for p in points if _key(p) not in self._done}.values())
        runs: dict[str, list[Sample]] = {_key(p): [] for p in pending}
        for rep in range(self.reps):
            for data in pending:
                runs[_key(data)].append(self._run_once(data, rep))
        self._done.update(runs)

    def _run_once(self, data: dict[str, Any], rep: int) -> Sample:
        scenario = parse_scenario(data, f"benchmark point {data['name']}")
        run_dir = new_run_dir(self.out_dir, scenario.name)
        start = time.monotonic()
        execute(scenario, run_dir, scenario.seed, progress=None)
        seconds = time.monotonic() - start
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
        _, metrics = load_run(run_dir)
        self.log(f"bench: {scenario.name} (rep {rep + 1}/{self.reps}): {seconds:.1f} s, exit {metrics.exit_code}")
        return Sample(run_dir, read_events(run_dir), metrics, seconds)


def _key(data: dict[str, Any]) -> str:
    return json.dumps(data, sort_keys=True)


def median_of(samples: list[Sample], value: Callable[[Sample], float | None]) -> float | None:
    """The median of a quantity over a point's runs; runs where it is missing (None) are left out."""
    values = [v for v in (value(s) for s in samples) if v is not None]
    return statistics.median(values) if values else None
