"""The fault plan: a scenario's faults resolved, once, from its seed, into exact (kind, whom, when).

The runner writes the plan to the run folder (plan.json) and arms the trainer with it; every rank reads the
same file, so all agree on the victim and the moment without talking, and a run can be replayed from the
plan its journal records. Each planned fault is an instance of its kind's planned class (its family's
chaos/faults/<family>/planned.py), typed again by the side that fires it (chaos/faults/in_rank_kinds.py, outside_kinds.py); plan.json
holds one flat record per fault: the fields below, ``type``, then the kind's own fields.

Standard library (and runlog) only: the ranks read plans without the scenario schema (pydantic) behind it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from runlog.layout import RunFolderError


class Side(str, Enum):
    """Who fires a fault."""

    RANK = "rank"
    """The chaos component inside the target rank (chaos/hooks)."""
    RUNNER = "runner"
    """The runner, with real signals to real pids (chaos/supervise/signals.py)."""
    NODE = "node"
    """The node supervisor: a whole simulated node's agent and ranks (chaos/supervise/nodes.py; on a Slurm
    node its agent wrapper, chaos/supervise/slurm_agent.py)."""
    SLURM = "slurm"
    """Slurm itself, on request of the host that submitted the job (chaos/supervise/slurm.py)."""


@dataclass(frozen=True)
class PlannedFault:
    """One fault of a run: its kind (the class), and whom and when it strikes."""

    type: ClassVar[str]
    side: ClassVar[Side]
    fault_id: str
    rank: int | None
    """The target rank; None for a fault aimed at several ranks, the launcher or a node."""
    attempt: int
    at_step: int | None
    delay_s: float | None
    """Seconds after the start of `attempt` (after_s + 0.2*U(0,1)*after_s, as Bridge draws it)."""

    def params(self) -> dict[str, Any]:
        """The kind's own fields that are set (``grace_s``, ``ranks``, ``mode``, ...)."""
        base = {f.name for f in dataclasses.fields(PlannedFault)}
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in base and getattr(self, f.name) is not None}

    def to_json(self) -> dict[str, Any]:
        record = dataclasses.asdict(self)
        return {"fault_id": record.pop("fault_id"), "type": self.type, **record}


K = TypeVar("K", bound=PlannedFault)


def write_plan(path: Path, faults: Iterable[PlannedFault]) -> None:
    path.write_text(json.dumps({"faults": [f.to_json() for f in faults]}, indent=1))


def plan_records(path: str | Path) -> list[dict[str, Any]]:
    """The plan's records as written (what a journal keeps, and what a replay compares); RunFolderError,
    naming the file, when it is not a plan."""
    p = Path(path)
    try:
        records = json.loads(p.read_bytes())["faults"]
    except OSError as e:
        raise RunFolderError(f"{p}: cannot read ({e.strerror})") from None
    except (ValueError, KeyError, TypeError, RecursionError):  # not JSON (or UTF-8), or no "faults"
        records = None
    if not isinstance(records, list) or not all(isinstance(r, dict) and isinstance(r.get("type"), str) for r in records):
        raise RunFolderError(f'{p}: not a fault plan ({{"faults": [{{"type": ...}}, ...]}})')
    return records


def read_plan(path: str | Path, kinds: Iterable[type[K]]) -> list[K]:
    """The plan's faults of `kinds` (the ones a side fires), typed; the other sides' are left out."""
    by_type = {kind.type: kind for kind in kinds}
    return [
        by_type[record["type"]](**{k: v for k, v in record.items() if k != "type"})
        for record in plan_records(path) if record["type"] in by_type
    ]


def others(path: str | Path, kinds: Iterable[type[PlannedFault]]) -> list[PlannedFault]:
    """The plan's faults not of `kinds` (the other sides'), as whom and when alone: what a rank needs to
    know of the supervisor's faults (it waits at their steps, chaos/hooks/injector.py)."""
    own = {kind.type for kind in kinds}
    base = [f.name for f in dataclasses.fields(PlannedFault)]
    return [PlannedFault(**{k: record[k] for k in base}) for record in plan_records(path) if record["type"] not in own]


INJECTOR = "chaos"
"""The trainer component that fires a plan's faults inside the ranks (entry point group trainer.components)."""


def arming(plan_file: str | Path) -> list[str]:
    """The trainer overrides that arm its ranks with a plan: the injector component, and the plan it reads."""
    return [f"fault_injection.component={INJECTOR}", f"fault_injection.plan={plan_file}"]
