"""The search: hypothesis draws schedules from the base's space, each runs for real and is judged; a
schedule that breaks an invariant is shrunk by hypothesis, written as a scenario file, and run again.

Reproducible: hypothesis is seeded with ``--seed``, so the same seed draws the same schedules in the same
order; its example database (``DIR/.hypothesis``) and the judged schedules (``DIR/judged.jsonl``) stay in the
output folder, so a second session replays the failures first and reuses every schedule judged before.
The budget bounds the search and the shrinking: no run starts that the time left cannot fit.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as seeded
from hypothesis.database import DirectoryBasedExampleDatabase

from chaos.errors import BadInput
from chaos.explore.invariants import SAYS, broken, evidence, expect_for
from chaos.explore.observe import Observed, observe
from chaos.explore.settings import Draws
from chaos.explore.space import Kind, Schedule, Space, allowed_kinds, fault_registry, space_of
from chaos.judge.baseline import baseline_key, cache_dir
from chaos.judge.timeline import load_run
from chaos.schema.loader import load_scenario
from chaos.schema.scenario import Scenario
from chaos.supervise.runner import run_scenario, unrunnable
from runlog.layout import RunFolder

FIRST_RUN_S = 20.0
"""What one run of a base is taken to need before any has run (a tiny base: start-up, a restart, judging)."""


class ExploreError(BadInput):
    """Bad input to chaos explore: its base, budget or fault types."""


@dataclass(frozen=True)
class Options:
    base: Path
    budget_s: float
    seed: int
    out: Path
    faults: tuple[str, ...] = ()
    """Fault types (or kind labels) to draw from; empty: every one the base allows."""
    reruns: int = 2


@dataclass(frozen=True)
class Record:
    """One schedule, run and judged."""

    key: str
    faults: list[dict[str, Any]]
    expect: dict[str, Any]
    """What the invariants say of this schedule: its scenario's expectations."""
    broken: tuple[str, ...]
    run_dir: str
    run_s: float
    """The run itself (what a plain `chaos run` of the schedule runs)."""
    explore_s: float
    """Everything explore spent on it: drawing, the run, judging the invariants, recording."""
    found_at_s: float
    """Seconds since the search started."""
    reused: bool = False
    size: tuple[int, ...] = ()
    cells: tuple[tuple[str, str], ...] = ()
    """Its faults on the step x fault-kind grid."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The trainer settings it ran with away from the base's own (drawn from ``explore.settings``)."""


@dataclass(frozen=True)
class Found:
    invariant: str
    says: str
    scenario: str
    schedule: list[dict[str, Any]]
    run_dir: str
    picture: str
    evidence: str
    reproduced: str
    """always, sometimes or never, over the reruns of the scenario file."""
    reruns: list[bool]
    time_to_find_s: float
    shrunk_from: int
    settings: dict[str, Any] = field(default_factory=dict)
    """The trainer settings it needs away from the base's own (drawn from ``explore.settings``)."""


@dataclass
class Exploration:
    options: Options
    base_name: str
    kinds: list[str]
    steps: list[int]
    cells: int
    """Cells of the step x fault-kind grid a schedule can reach (the coverage's whole)."""
    records: list[Record] = field(default_factory=list)
    found: list[Found] = field(default_factory=list)
    seconds: float = 0.0
    shrink_cut: bool = False
    """Shrinking stopped because the budget was spent (the scenario is the smallest failure seen by then)."""


def parse_budget(text: str) -> float:
    """'10m', '90s', '1h' or plain seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    number, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1)
    try:
        seconds = float(number) * unit
    except ValueError:
        raise ExploreError(f"--budget: {text!r} is not a duration (10m, 90s, 1h or seconds)") from None
    if not seconds > 0:
        raise ExploreError(f"--budget: {text!r} must be more than nothing")
    return seconds


def prepare(options: Options) -> tuple[Scenario, tuple[Kind, ...]]:
    """The validated base and the kinds to draw; ExploreError when explore cannot run it (one line)."""
    base = load_scenario(options.base)
    refused = [why for why, bad in (
        ("nodes > 1", base.nodes > 1), ("relaunch", base.relaunch), ("job_retries", bool(base.job_retries)),
        ("in-process restart", base.command is None and base.config.inprocess_restart.enabled),
    ) if bad]
    if refused:
        raise ExploreError(f"{options.base}: explore takes a one-node base restarted by its launcher; it has {refused[0]}")
    cannot = unrunnable(base, None)
    if cannot is not None:
        raise ExploreError(f"{options.base}: {cannot}")
    allowed = allowed_kinds(base, fault_registry())
    kinds = allowed.kinds
    if options.faults:
        kinds = _chosen(options, allowed.kinds, {r.label: r.reason for r in allowed.refused})
    if not kinds:
        raise ExploreError(f"{options.base}: no fault type can be explored on this base")
    return base, kinds


def _chosen(options: Options, allowed: tuple[Kind, ...], refused: dict[str, str]) -> tuple[Kind, ...]:
    registry = fault_registry()
    for name in options.faults:
        if name not in registry and name not in refused and not any(k.label == name for k in allowed):
            raise ExploreError(f"--faults: unknown fault type {name!r} (known: {', '.join(sorted(registry))})")
    kinds = tuple(k for k in allowed if k.type in options.faults or k.label in options.faults)
    for name in options.faults:
        if not any(name in (k.type, k.label) for k in kinds):
            why = next((why for label, why in refused.items() if name in (label, label.split("(")[0])), "explore does not draw it")
            raise ExploreError(f"--faults: {name} cannot be explored on {options.base.name}: {why}")
    return kinds


def run_estimate(base: Scenario, observed: Observed | None = None) -> float:
    """What one run of the base takes: twice its fault-free run (a fault adds a restart): a command's observed
    one, our trainer's cached baseline; else a guess."""
    if observed is not None:
        return 2 * observed.wall_s + 4
    events = RunFolder(cache_dir() / baseline_key(base))
    if base.command is not None or not events.final_weights.is_file():
        return FIRST_RUN_S
    wall = load_run(events.root)[1].wall_s
    return FIRST_RUN_S if wall is None else 2 * wall + 4


def fits(options: Options, base: Scenario, estimate: float) -> None:
    if options.budget_s < estimate:
        raise ExploreError(f"--budget: {options.budget_s:g} s cannot fit one run of {base.name} (about {estimate:.0f} s)")


def base_digest(base: Scenario) -> str:
    """The base's settings, whatever its faults and expectations: what judged schedules and observations are kept by."""
    settings_only = json.dumps(base.model_dump(mode="json", exclude={"faults", "expect"}), sort_keys=True)
    return hashlib.sha256(settings_only.encode()).hexdigest()[:12]


class Search:
    """One session: the budget, the schedules judged (this session's and reused ones), the progress line."""

    def __init__(
        self, options: Options, base: Scenario, space: Space, progress: Callable[[str], None] | None,
        start: float, estimate: float,
    ):
        self.options, self.base, self.space, self.progress = options, base, space, progress
        self.draws = Draws(base, space)
        self.start, self.estimate = start, estimate
        fits(options, base, estimate)
        self.digest = base_digest(base)
        self.log = options.out / "judged.jsonl"
        self.earlier = self._earlier()
        self.judged: dict[str, Record] = {}
        self.cut = False
        self.last_end = time.monotonic()  # a command's fault-free run, before, is no schedule's

    def _earlier(self) -> dict[str, Record]:
        """Schedules an earlier session judged on this base."""
        if not self.log.is_file():
            return {}
        out = {}
        for line in self.log.read_text().splitlines():
            row = json.loads(line)
            if row.pop("base") == self.digest:
                cells = tuple(tuple(c) for c in row.pop("cells"))
                record = Record(**{**row, "broken": tuple(row["broken"]), "size": tuple(row["size"]), "cells": cells, "reused": True})
                out[record.key] = record
        return out

    def left(self) -> float:
        return self.options.budget_s - (time.monotonic() - self.start)

    def judge(self, schedule: Schedule) -> Record | None:
        """The schedule run and judged (or as judged before); None when the time left fits no run."""
        base, space = self.draws.drawn(schedule.settings)
        faults, expect = [f.to_yaml() for f in schedule.faults], expect_for(base, space, schedule)
        known = self.judged.get(schedule.key) or self.earlier.get(schedule.key)
        if known is not None and known.expect == expect:  # judged against what the invariants say of it now
            self.judged[schedule.key] = known
            return known
        typical = statistics.median(r.run_s for r in self.judged.values() if not r.reused) if self._fresh() else self.estimate
        if self.left() < typical:
            self.cut = self.cut or any(r.broken for r in self.judged.values())
            return None
        t0 = time.monotonic()
        scenario = base.replace(name=f"{self.base.name}-explore", faults=faults, expect=expect, known_failure=None, explore=None)
        outcome = run_scenario(scenario, self.options.out / "runs", progress=None)
        run_s = time.monotonic() - t0
        now = time.monotonic()
        record = Record(
            schedule.key, faults, expect, broken(outcome.journal), str(outcome.run_dir), run_s, now - self.last_end,
            now - self.start, size=schedule.size(), cells=tuple(f.cell for f in schedule.faults), settings=dict(schedule.settings),
        )
        self.judged[schedule.key] = record
        with self.log.open("a") as f:
            f.write(json.dumps({**asdict(record), "base": self.digest}) + "\n")
        self._show(record)
        self.last_end = time.monotonic()  # what follows until the next run ends is the next schedule's
        return record

    def _fresh(self) -> bool:
        return any(not r.reused for r in self.judged.values())

    def _show(self, record: Record) -> None:
        if self.progress is None:
            return
        found = len({i for r in self.judged.values() for i in r.broken})
        verdict = "broke " + ", ".join(record.broken) if record.broken else "ok"
        self.progress(
            f"explore: {len(self.judged)} judged, {found} found, {max(0, self.left()) / 60:.1f} min left | "
            f"{record.key}: {verdict} ({record.run_s:.1f} s)"
        )


class InvariantBroken(AssertionError):
    """What the probe raises for hypothesis: the schedule broke an invariant."""


def search(session: Search) -> None:
    """Judge the canonical schedules (the base's, then one per drawn setting value), then let hypothesis draw,
    judge and shrink until its examples or the budget run out."""
    crash: list[BaseException] = []

    def probe(schedule: Schedule) -> None:
        if crash:
            return
        try:
            record = session.judge(schedule)
        except Exception as e:  # a harness error is not a schedule's failure: stop, and raise it afterwards
            crash.append(e)
            return
        if record is not None and record.broken:
            raise InvariantBroken(", ".join(record.broken))

    probe._hypothesis_internal_add_digest = session.digest.encode()  # type: ignore[attr-defined]  # one database key per base
    examples = int(session.options.budget_s / 3) + len(session.earlier) + 20
    test = seeded(session.options.seed)(settings(
        database=DirectoryBasedExampleDatabase(session.options.out / ".hypothesis"), max_examples=examples, deadline=None,
        suppress_health_check=list(HealthCheck), phases=(Phase.reuse, Phase.generate, Phase.shrink),
        verbosity=Verbosity.quiet, print_blob=False, report_multiple_bugs=False,
    )(given(session.draws.strategy())(probe)))
    for canonical in session.draws.canonicals():  # what a person writes first; hypothesis draws and shrinks its own
        if session.judge(canonical) is None:
            break
    with contextlib.suppress(InvariantBroken):  # the failures are in the records; smallest() picks from them
        test()
    if crash:
        raise crash[0]


def smallest(records: list[Record]) -> dict[str, tuple[Record, int]]:
    """Per broken invariant, the simplest schedule that broke it, and how many schedules broke it."""
    out: dict[str, tuple[Record, int]] = {}
    for inv in dict.fromkeys(i for r in records for i in r.broken):
        failing = [r for r in records if inv in r.broken]
        out[inv] = (min(failing, key=lambda r: (r.size, r.found_at_s)), len(failing))
    return out


def write_found(session: Search, invariants: list[str], record: Record) -> Path:
    """The failing schedule as a scenario file `chaos run` reproduces: the base's own file with its faults
    and the invariants' expectations."""
    folder = session.options.out / "found"
    folder.mkdir(parents=True, exist_ok=True)
    name = f"found_{invariants[0]}_{hashlib.sha256(record.key.encode()).hexdigest()[:6]}"
    raw = yaml.safe_load(session.options.base.read_text())
    raw.pop("known_failure", None)
    raw.pop("explore", None)
    if record.settings:  # the settings it needs, over the base's own
        raw["trainer"] = {**(raw.get("trainer") or {}), **record.settings}
    if session.base.command is not None:
        raw["command"] = session.base.command  # resolved against the base's folder, not found/
    says = "; ".join(SAYS.get(i, i) for i in invariants)
    description = f"Found by chaos explore (seed {session.options.seed}) from {session.options.base}: {says}: broken under {record.key}."
    data = {**raw, "name": name, "description": description, "faults": record.faults,
            "expect": record.expect}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, width=110))
    load_scenario(path)  # what chaos run will read
    return path


def reruns(session: Search, path: Path) -> list[dict[str, Any]]:
    """The scenario file run `reruns` times: each run's journal."""
    scenario = load_scenario(path)
    return [run_scenario(scenario, session.options.out / "runs", progress=None).journal for _ in range(session.options.reruns)]


def explore(options: Options, progress: Callable[[str], None] | None = print) -> Exploration:
    """Search, shrink, write and rerun what was found."""
    base, kinds = prepare(options)
    start, observed = time.monotonic(), None
    fits(options, base, run_estimate(base))
    options.out.mkdir(parents=True, exist_ok=True)
    if base.command is not None:
        if progress:
            progress(f"explore: {base.name} is a `command`: its fault-free run first, to see its steps and checkpoints")
        observed = observe(base, options.out, base_digest(base))
    space = space_of(base, kinds, observed)
    session = Search(options, base, space, progress, start, run_estimate(base, observed))
    if progress:
        progress(f"explore: {base.name}: {len(space.kinds)} fault kinds at steps {list(space.steps())}, budget "
                 f"{options.budget_s:g} s, seed {options.seed}; runs in {options.out / 'runs'}")
    search(session)
    result = Exploration(options, base.name, [k.label for k in space.kinds], list(space.steps()), len(space.cells()),
                         list(session.judged.values()), shrink_cut=session.cut)
    files: dict[str, tuple[Path, list[dict[str, Any]]]] = {}  # one file and one set of reruns per schedule
    found = smallest(result.records)
    for invariant, (record, count) in found.items():
        if record.key not in files:
            path = write_found(session, [i for i, (r, _) in found.items() if r.key == record.key], record)
            if progress:
                progress(f"explore: {record.key} broke an invariant; rerunning {path} {options.reruns} times")
            files[record.key] = path, reruns(session, path)
        path, journals = files[record.key]
        again = [invariant in broken(j) for j in journals]
        reproduced = "always" if all(again) else "sometimes" if any(again) else "never"
        first = min(r.found_at_s for r in result.records if invariant in r.broken)
        result.found.append(Found(
            invariant, SAYS.get(invariant, invariant), str(path), record.faults, record.run_dir,
            str(RunFolder(Path(record.run_dir)).picture), evidence(_journal(record), invariant), reproduced, again,
            first, count, record.settings,
        ))
    result.seconds = time.monotonic() - session.start
    return result


def _journal(record: Record) -> dict[str, Any]:
    return json.loads(RunFolder(Path(record.run_dir)).journal.read_text())
