"""`python -m benchmarks mutants [--budget 90s] [--only a,b] [--out DIR] [--no-docs]`: how many seeded
resiliency bugs the verdicts catch.

Per mutant: a temporary copy of the project with the bug planted (benchmarks/mutants/catalogue.py), the
catalogue's relevant scenarios run in it (`python -m chaos run`, as a user runs them), then `chaos explore`
on the mutant's base with a fixed budget. The fault-free baselines are the unmutated tree's (this
checkout's cache, computed here first), so a mutant is judged against the correct run. The table goes to
chaos-runs/mutants/ and, between its markers, into docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.mutants.catalogue import BASES, MUTANTS, Mutant
from chaos.judge.baseline import cache_dir

ROOT = Path(__file__).resolve().parents[2]
COPIED = ("trainer", "chaos", "runlog", "scenarios", "benchmarks", "pyproject.toml")
BEGIN, END = "<!-- mutants:begin -->", "<!-- mutants:end -->"


@dataclass(frozen=True)
class ScenarioResult:
    scenario: str
    exit_code: int
    failed: list[str]
    """The verdicts that failed (none when the mutant slipped through)."""


@dataclass
class MutantResult:
    name: str
    bug: str
    scenarios: list[ScenarioResult] = field(default_factory=list)
    explore: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def caught_by(self) -> list[str]:
        by = [f"{s.scenario} ({', '.join(s.failed) or f'exit {s.exit_code}'})" for s in self.scenarios if s.exit_code]
        by += [f"explore: {f['invariant']}" for f in self.explore.get("found", [])]
        return by


def project_copy(mutant: Mutant | None, into: Path, committed: bool = True) -> Path:
    """The project's files (what a run imports and reads) copied to `into`, with the mutant's bug planted. The
    committed tree by default, so that edits in progress in this checkout do not leak into a benchmark; the
    working tree as it is for a test of that tree."""
    into.mkdir(parents=True, exist_ok=True)
    if committed:
        archive = subprocess.run(["git", "archive", "HEAD", *COPIED], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    else:
        for name in COPIED:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, into / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, into / name)
    if mutant is not None:
        mutant.apply(into)
    return into


def chaos(root: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """`python -m chaos ARGS` in the copy at `root`: its own packages first on the path, this checkout's baselines."""
    env = {**os.environ, "PYTHONPATH": str(root), "CHAOS_CACHE_DIR": str(cache_dir())}
    return subprocess.run([sys.executable, "-m", "chaos", *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=timeout)


def run_scenario(root: Path, scenario: str, out: Path) -> ScenarioResult:
    proc = chaos(root, "run", scenario, "--json", "--out", str(out), timeout=600)
    try:
        verdicts = json.loads(proc.stdout)["verdicts"]
    except (ValueError, KeyError):
        return ScenarioResult(scenario, proc.returncode, [f"no judged run: {proc.stderr.strip().splitlines()[-1:]}"])
    return ScenarioResult(scenario, proc.returncode, [v["name"] for v in verdicts if not v["passed"]])


def run_explore(root: Path, mutant: Mutant, budget: str, out: Path) -> dict[str, Any]:
    base = root / mutant.base_file().relative_to(ROOT)
    proc = chaos(root, "explore", str(base), "--budget", budget, "--seed", "0", "--reruns", "1", "--json", "--out", str(out),
                 timeout=1800)
    try:
        return json.loads(proc.stdout)
    except ValueError:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1], "found": []}


def warm_baselines(out: Path) -> None:
    """The bases' fault-free runs by the unmutated trainer (the committed tree), into this checkout's cache."""
    with tempfile.TemporaryDirectory(prefix="mutant-none-") as tmp:
        root = project_copy(None, Path(tmp))
        for base in sorted(BASES.glob("*.yaml")):
            proc = chaos(root, "run", str(root / base.relative_to(ROOT)), "--out", str(out), timeout=600)
            if proc.returncode:
                said = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
                raise SystemExit(f"mutants: the unmutated base {base.name} fails (exit {proc.returncode}): {said}")


def bench(mutant: Mutant, budget: str, out: Path) -> MutantResult:
    start = time.monotonic()
    result = MutantResult(mutant.name, mutant.bug)
    shutil.rmtree(out / mutant.name, ignore_errors=True)  # explore would reuse an earlier run's judgments
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as tmp:
        root = project_copy(mutant, Path(tmp))
        for scenario in mutant.scenarios:
            result.scenarios.append(run_scenario(root, scenario, out / mutant.name / "runs"))
            print(f"mutants: {mutant.name}: {scenario}: exit {result.scenarios[-1].exit_code} {result.scenarios[-1].failed}", flush=True)
        result.explore = run_explore(root, mutant, budget, out / mutant.name / "explore")
    result.seconds = time.monotonic() - start
    print(f"mutants: {mutant.name}: caught by {result.caught_by or 'nothing'} ({result.seconds:.0f} s)", flush=True)
    return result


def earlier(path: Path) -> dict[str, MutantResult]:
    """The results a run before this one wrote (`--only` reruns some mutants and keeps the others' rows)."""
    if not path.is_file():
        return {}
    rows = json.loads(path.read_text())
    return {r["name"]: MutantResult(r["name"], r["bug"], [ScenarioResult(**s) for s in r["scenarios"]], r["explore"], r["seconds"])
            for r in rows}


def table(results: list[MutantResult], budget: str) -> str:
    caught = sum(bool(r.caught_by) for r in results)
    lines = [
        f"{caught} of {len(results)} mutants caught (explore's budget {budget} per mutant, seed 0; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f} at the end).", "",
        "| mutant | the bug | caught by the catalogue | explore: invariant, time to find | explore's shrunk schedule | schedules judged |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        scen = "; ".join(f"{s.scenario} ({', '.join(s.failed) or f'exit {s.exit_code}'})" for s in r.scenarios if s.exit_code) or "survived"
        found = r.explore.get("found", [])
        first = min(found, key=lambda f: f["time_to_find_s"]) if found else None
        inv = f"{first['invariant']}, {first['time_to_find_s']:.0f} s ({first['reproduced']})" if first else (
            f"error: {r.explore['error']}" if "error" in r.explore else "survived")
        shrunk = "; ".join("{" + ", ".join(f"{k}: {v}" for k, v in f.items()) + "}" for f in first["schedule"]) if first else ""
        if first and first.get("settings"):  # drawn from the base's explore.settings
            shrunk += " with " + ", ".join(f"{k}: {v}" for k, v in first["settings"].items())
        lines.append(f"| {r.name} | {r.bug} | {scen} | {inv} | {shrunk} | {r.explore.get('schedules_judged', 0)} |")
    return "\n".join(lines)


def write_docs(text: str) -> None:
    """The table between the markers of docs/performance.md (the markers added at its end the first time)."""
    doc = ROOT / "docs" / "performance.md"
    current = doc.read_text()
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in current and END in current:
        head, rest = current.split(BEGIN, 1)
        current = head + block + rest.split(END, 1)[1]
    else:
        current = current.rstrip("\n") + "\n\n" + block + "\n"
    doc.write_text(current)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks mutants", description="Seeded resiliency bugs: which verdicts catch them.")
    p.add_argument("--budget", default="90s", help="chaos explore's budget per mutant (default: %(default)s)")
    p.add_argument("--only", default="", help="comma-separated mutant names (default: all)")
    p.add_argument("--out", type=Path, default=Path("chaos-runs/mutants"), help="output folder (default: %(default)s)")
    p.add_argument("--no-docs", action="store_true", help="leave docs/performance.md as it is")
    args = p.parse_args(argv)
    known = {m.name: m for m in MUTANTS}
    chosen = [n for n in args.only.split(",") if n]
    unknown = [n for n in chosen if n not in known]
    if unknown:
        p.error(f"--only: unknown mutants {unknown}; known: {', '.join(known)}")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    warm_baselines(out / "control")
    kept = earlier(out / "results.json") if chosen else {}
    results: dict[str, MutantResult] = {}
    for mutant in [known[n] for n in chosen] if chosen else MUTANTS:
        results[mutant.name] = bench(mutant, args.budget, out)
        rows = [results.get(m.name) or kept[m.name] for m in MUTANTS if m.name in results or m.name in kept]
        text = table(rows, args.budget)  # written after every mutant: a stopped run keeps what it measured
        (out / "results.json").write_text(json.dumps([asdict(r) | {"caught_by": r.caught_by} for r in rows], indent=2))
        (out / "results.md").write_text(text + "\n")
    if not args.no_docs:
        write_docs(text)
    print(text)
    return 0
