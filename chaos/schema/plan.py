"""The fault plan: a scenario's faults resolved, once, from its seed, into exact (rank, type, when).

The runner writes the plan to the run folder and arms the trainer with it
(``fault_injection.plan=<file>``); every rank reads the same file, so all agree on the victim and the
moment without talking, and a run can be replayed from the plan its journal records.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chaos.schema.scenario import Scenario
from runlog.env import node_id


@dataclass(frozen=True)
class PlannedFault:
    fault_id: str
    type: str
    """The concrete fault type ('random' is resolved here into rank_killed or rank_hung)."""
    rank: int | None
    """None for a signal fault aimed at several ranks or the launcher (see `options`)."""
    attempt: int
    at_step: int | None
    delay_s: float | None
    """Seconds after the trainer's start of `attempt` (after_s + 0.2*U(0,1)*after_s, as Bridge draws it)."""
    options: dict[str, Any] = field(default_factory=dict)
    """The type's own fields (grace_s, ranks, target, mode, during, message, stop_s, ...)."""


def plan_faults(scenario: Scenario, seed: int) -> list[PlannedFault]:
    """Resolve every random choice of the scenario's faults from `seed` (one draw order, documented)."""
    rng = random.Random(seed)
    planned = []
    for i, fault in enumerate(scenario.faults):
        kind = rng.choice(["rank_hung", "rank_killed"]) if fault.type == "random" else fault.type
        rank = fault.rank if fault.rank is not None or kind == fault.type else rng.randrange(scenario.world_size)
        delay = None if fault.after_s is None else fault.after_s + 0.2 * rng.random() * fault.after_s
        options = fault.model_dump(exclude={"type", "rank", "attempt", "at_step", "after_s"}, exclude_none=True)
        if options.get("persistence") == "persistent":
            options["node"] = node_id()  # the faulty hardware: the first launch's node (a relaunch may move)
        planned.append(PlannedFault(f"f{i}", kind, rank, fault.attempt, fault.at_step, delay, options))
    return planned


INJECTOR = "chaos"
"""The trainer component that fires a plan's faults inside the ranks (entry point group trainer.components)."""


def arming(plan_file: str | Path) -> list[str]:
    """The trainer overrides that arm its ranks with a plan: the injector component, and the plan it reads."""
    return [f"fault_injection.component={INJECTOR}", f"fault_injection.plan={plan_file}"]


def write_plan(path: Path, faults: list[PlannedFault]) -> None:
    path.write_text(json.dumps({"faults": [asdict(f) for f in faults]}, indent=1))


def read_plan(path: str | Path) -> list[PlannedFault]:
    data = json.loads(Path(path).read_text())
    return [PlannedFault(**f) for f in data["faults"]]
