"""What must hold whatever the schedule, each written as the schedule's scenario expectations.

A schedule's scenario (the base with its faults) expects what the invariants say of that very schedule:
``expect_for``. The run is judged by the harness's own verdicts, so a found scenario file that ``chaos run``
runs is judged by exactly the invariants it broke; ``broken`` maps the failed verdicts back to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chaos.explore.space import Schedule, Space
from chaos.schema.scenario import Scenario

FAILED_EXIT = 1
"""The launcher's exit code once the restart budget is spent (ft_launcher and torchrun alike)."""


@dataclass(frozen=True)
class Invariant:
    name: str
    says: str
    verdicts: tuple[str, ...]
    """The verdicts of a judged run that carry it."""


INVARIANTS = (
    Invariant("completes", "the job completes when its faults are fewer than its restart budget, and fails "
              "(launcher exit 1) when they are not", ("exit_code", "completed_steps")),
    Invariant("same_as_baseline", "the recovered run's every loss and final weights equal the fault-free run's, "
              "bit for bit", ("baseline",)),
    Invariant("lost_steps", "the first fault costs no more steps than the checkpoint settings allow (back to the "
              "newest checkpoint surely sealed)", ("lost_steps",)),
    Invariant("retention", "a restart resumes from the newest of the last checkpoint.most_recent_k sealed checkpoints "
              "that no fault destroyed, never from a pruned one; losing all k is a failure only when a fault destroyed them",
              ("stale_resumes",)),
    Invariant("no_corrupt_load", "a checkpoint is rejected as corrupt only when one was corrupted on purpose, "
              "and then it is", ("checkpoints_rejected",)),
    Invariant("failures_explained", "every failure is explained by an injected fault, every restart by a strike, "
              "and every fault came due and struck", ("unexplained_failures", "restarts", "faults_injected", "faults_found_targets")),
    Invariant("nothing_left_behind", "the run ends before its deadline and leaves no process behind",
              ("deadline", "processes_reaped")),
    Invariant("no_pitfall", "the run falls into none of the card's pitfalls but those the base names", ("pitfalls",)),
)
BY_VERDICT = {v: inv.name for inv in INVARIANTS for v in inv.verdicts}
SAYS = {inv.name: inv.says for inv in INVARIANTS}


def expect_for(base: Scenario, space: Space, schedule: Schedule) -> dict[str, Any]:
    """The expectations of `schedule` run on `base`: what every invariant says of it."""
    survives = schedule.strikes <= space.max_restarts
    corrupted = any(f.kind.type == "checkpoint_corrupt" for f in schedule.faults)
    restarts = schedule.strikes if survives else space.max_restarts
    ours = base.command is None  # a command's run shows no weights and no checkpoint verdicts of ours
    expect: dict[str, Any] = {"restarts": restarts, "faults_injected": len(schedule.faults)}
    if ours:
        expect["checkpoints_rejected"] = {"min": 1} if corrupted else {"max": 0}
        if restarts:
            expect["stale_resumes"] = {"max": 0}
    if restarts and (ours or space.save_interval):  # lost steps are counted at the first restart
        expect["lost_steps"] = {"max": schedule.lost_allowed if ours else command_lost_allowed(space)}
    if survives:
        expect.update(exit_code=0, completed_steps=space.train_iters, **({"baseline": "exact"} if ours else {}))
    else:
        expect["exit_code"] = FAILED_EXIT
    if base.expect.pitfalls:
        expect["pitfalls"] = list(base.expect.pitfalls)
    return expect


def command_lost_allowed(space: Space) -> int:
    """A command's bound: a signal from outside lands some time after the step it fired at (no hook holds the
    rank there), so the step a strike reached is not known; what the checkpoint interval allows is. A sync
    save is sealed at its step: at most one interval is lost; an async one at the latest when the next begins:
    at most two."""
    return (space.save_interval or 0) * (2 if space.async_save else 1)


def broken(journal: dict[str, Any]) -> tuple[str, ...]:
    """The invariants a judged run broke (a failed verdict no invariant names is its own)."""
    failed = [v["name"] for v in journal["verdicts"] if not v["passed"]]
    return tuple(dict.fromkeys(BY_VERDICT.get(name, name) for name in failed))


def evidence(journal: dict[str, Any], invariant: str) -> str:
    """The failed verdicts behind a broken invariant, as the run's summary words them."""
    return "; ".join(v["message"] for v in journal["verdicts"] if not v["passed"] and BY_VERDICT.get(v["name"], v["name"]) == invariant)
