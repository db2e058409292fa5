"""What a `command` base's fault-free run shows: explore's space for a trainer known only from outside.

Explore draws our trainer's space from its config (chaos/explore/space.py, ``space_of``). A foreign command's
settings are its own arguments, which explore does not parse, so it runs the base once without faults and
reads what the run's events show: the steps it completed, and the checkpoints its adapter saw it save
(Megatron's save lines, sync or async). A ``step_pattern`` command shows no checkpoints. The observation is
kept in the output folder (``observed.json``, per base), so a second session does not run it again.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from chaos.errors import BadInput
from chaos.judge.timeline import load_run
from chaos.schema.scenario import Scenario
from chaos.supervise.runner import run_scenario
from runlog import names
from runlog.reader import read_events


@dataclass(frozen=True)
class Observed:
    train_iters: int
    """The last step the fault-free run completed."""
    saves: tuple[int, ...]
    """The steps whose checkpoint save ended, in order (none seen: empty)."""
    async_save: bool
    wall_s: float
    run_dir: str


def observe(base: Scenario, out: Path, digest: str) -> Observed:
    """The base's fault-free run, as kept in `out` for this base (`digest`) or run now; BadInput when it fails
    or shows no step (explore cannot judge schedules against a run that does not work without faults)."""
    kept = out / "observed.json"
    if kept.is_file():
        row = json.loads(kept.read_text())
        if row.pop("base") == digest:
            return Observed(**{**row, "saves": tuple(row["saves"])})
    outcome = run_scenario(base.replace(name=f"{base.name}-observed", faults=[], expect={}, known_failure=None), out / "runs", progress=None)
    failed = [v["message"] for v in outcome.journal["verdicts"] if not v["passed"]]
    if failed:
        raise BadInput(f"{base.name}: its fault-free run failed ({failed[0]}); see {outcome.run_dir}")
    observed = read_observation(outcome.run_dir)
    kept.write_text(json.dumps({**asdict(observed), "base": digest}))
    return observed


def read_observation(run_dir: Path) -> Observed:
    """The steps and checkpoint saves of a fault-free run's events (rank 0's, as the adapter writes them)."""
    events = [e for e in read_events(run_dir) if e["rank"] == 0]
    steps = [int(e["iteration"]) for e in events if e["event"] == names.STEP]
    if not steps:
        raise BadInput(f"{run_dir.name}: its fault-free run showed no step; explore needs its steps (step_pattern or an adapter)")
    saved = [e for e in events if e["event"] == names.CHECKPOINT_SAVE_END]
    wall = load_run(run_dir)[1].wall_s
    return Observed(
        train_iters=max(steps), saves=tuple(sorted({int(e["iteration"]) for e in saved})),
        async_save=any(e.get("async") for e in saved), wall_s=wall or 0.0, run_dir=str(run_dir),
    )
