"""What a base scenario lets explore break, where, and the hypothesis strategy that draws fault schedules.

A schedule is one strike per attempt (a fault that kills the attempt's round: the launcher restarts it), in
attempt order, plus faults of a restart's checkpoint load that do not kill (a corrupted or lost checkpoint).
Steps are those that matter (at and around checkpoint steps, the first after a resume, the last), earliest
first, so hypothesis shrinks a schedule towards fewer faults, earlier steps, rank 0 and earlier attempts.

Every drawn schedule is made valid by construction (``Space.schedule``): a strike's step is never before the
previous strike's (its attempt, resumed from a checkpoint of an earlier step, reaches it), and a load fault
lands only where a checkpoint surely exists. Which checkpoints surely exist is modelled from the settings
(``Progress``): a sync save is sealed at its step, an async one at the latest when the next save begins
(it waits for the one in flight), a save killed in flight never is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, get_args

from hypothesis import strategies as st

from chaos.errors import BadInput
from chaos.schema.scenario import Scenario

if TYPE_CHECKING:
    from chaos.explore.observe import Observed

Trigger = Literal["step", "save", "local_save", "load"]

MAX_FAULTS = 3
"""Strikes per schedule at most (or the restart budget plus one, if smaller)."""


@dataclass(frozen=True)
class Kind:
    """One way of breaking a run: a fault type of the registry, with its own fields fixed, and its trigger."""

    type: str
    trigger: Trigger
    kills: bool = True
    """The attempt's round dies of it (the launcher restarts): a strike."""
    own: tuple[tuple[str, str], ...] = ()
    reaches_its_step: bool = False
    """The attempt may complete the step it strikes at: a save kill (the save follows the step), a signal from
    outside (the ranks wait for it after the step, before its save), a hang (NVRx's rank monitor sends SIGCONT
    before its SIGKILL, and the woken rank runs on in between)."""

    @property
    def label(self) -> str:
        return self.type if not self.own else f"{self.type}({','.join(v for _, v in self.own)})"


KINDS = (
    Kind("rank_killed", "step"),
    Kind("exception", "step"),
    Kind("sigkill", "step", reaches_its_step=True),
    Kind("segfault", "step"),
    Kind("abort", "step"),
    Kind("rank_hung", "step", reaches_its_step=True),
    Kind("fault_during_checkpoint", "save", own=(("during", "save"),), reaches_its_step=True),
    Kind("fault_during_checkpoint", "local_save", own=(("during", "local_save"),), reaches_its_step=True),
    Kind("fault_during_checkpoint", "load", own=(("during", "load"),)),
    Kind("checkpoint_corrupt", "load", kills=False, own=(("mode", "truncate"),)),
    Kind("checkpoint_corrupt", "load", kills=False, own=(("mode", "garble"),)),
    Kind("local_checkpoint_lost", "load", kills=False),
)
"""What explore draws from, in shrinking order (the simplest first)."""
COMMAND_KINDS = (Kind("sigkill", "step", reaches_its_step=True),)
"""What explore draws on a `command` base: a signal from outside, the one kind of KINDS that reaches a rank
running none of this project's hooks (explore draws none of the machine's faults: a full or stalled disk, a
network, memory)."""


@dataclass(frozen=True)
class Fault:
    kind: Kind
    rank: int
    attempt: int
    at_step: int | None
    """None for a fault of the attempt's checkpoint load."""

    def to_yaml(self) -> dict[str, Any]:
        """The fault as a scenario's author writes it."""
        out: dict[str, Any] = {"type": self.kind.type, **dict(self.kind.own), "rank": self.rank}
        if self.at_step is not None:
            out["at_step"] = self.at_step
        if self.attempt:
            out["attempt"] = self.attempt
        return out

    @property
    def cell(self) -> tuple[str, str]:
        """Where on the step x fault-kind grid it lies (a load fault: at its attempt's load)."""
        return self.kind.label, str(self.at_step) if self.at_step is not None else f"load {self.attempt}"

    @property
    def short(self) -> str:
        where = f"step {self.at_step}" if self.at_step is not None else "load"
        return f"{self.kind.label} rank {self.rank} {where} attempt {self.attempt}"


@dataclass(frozen=True)
class Schedule:
    faults: tuple[Fault, ...]
    lost_allowed: int
    """Steps the first strike may cost by the checkpoint settings (the newest checkpoint surely sealed)."""
    settings: tuple[tuple[str, Any], ...] = ()
    """The trainer settings drawn away from the base's own (its ``explore.settings``), in the base's order."""

    @property
    def strikes(self) -> int:
        return sum(f.kind.kills for f in self.faults)

    @property
    def key(self) -> str:
        drawn = f"[{', '.join(f'{k}={v}' for k, v in self.settings)}] " if self.settings else ""
        return drawn + "; ".join(f.short for f in self.faults)

    def size(self) -> tuple[int, ...]:
        """Hypothesis's notion of simpler, for picking the smallest of several failing schedules: fewer faults,
        fewer settings away from the base's, earlier steps, lower ranks, earlier attempts."""
        return (len(self.faults), len(self.settings), sum(f.at_step or 0 for f in self.faults),
                sum(f.rank for f in self.faults), sum(f.attempt for f in self.faults))


@dataclass(frozen=True)
class Progress:
    """The checkpoints surely sealed so far, modelled from the settings; what an attempt resumes from."""

    persistent: frozenset[int] = frozenset()
    local: frozenset[int] = frozenset()

    @property
    def resume(self) -> int:
        """The newest checkpoint, local or persistent (local wins a tie, as Bridge's resume decides)."""
        return max(self.persistent | self.local, default=0)


@dataclass(frozen=True)
class Space:
    world_size: int
    train_iters: int
    save_interval: int | None
    local_interval: int | None
    async_save: bool
    max_restarts: int
    kinds: tuple[Kind, ...]
    most_recent_k: int = -1
    """Checkpoint retention: only the newest k sealed checkpoints are kept (-1: all)."""
    dense: bool = False
    """Where its checkpoints are not known (a `command` that shows none), every step is one that matters."""

    @property
    def max_strikes(self) -> int:
        return min(MAX_FAULTS, self.max_restarts + 1)

    def persistent_steps(self) -> tuple[int, ...]:
        n = self.save_interval
        return tuple(range(n, self.train_iters + 1, n)) if n else ()

    def local_steps(self) -> tuple[int, ...]:
        n = self.local_interval
        return tuple(s for s in range(n, self.train_iters + 1, n) if s not in self.persistent_steps()) if n else ()

    def steps(self) -> tuple[int, ...]:
        """The steps that matter, earliest first: the first, at and around every checkpoint step (the step
        after one is the first after a resume; with async saves also the next, the save still in flight),
        the last."""
        if self.dense:
            return tuple(range(1, self.train_iters + 1))
        around = (-1, 0, 1, 2) if self.async_save else (-1, 0, 1)
        near = {c + d for c in (*self.persistent_steps(), *self.local_steps()) for d in around}
        return tuple(sorted(s for s in {1, self.train_iters, *near} if 1 <= s <= self.train_iters))

    def _save_steps(self, trigger: Trigger) -> tuple[int, ...]:
        """The steps a save kill can strike at: its saves (an async one is killed at the next step, while
        it is in flight: not the last step's)."""
        if trigger == "local_save":
            return self.local_steps()
        return tuple(s for s in self.persistent_steps() if not self.async_save or s < self.train_iters)

    def cells(self) -> set[tuple[str, str]]:
        """Every cell of the grid a schedule can reach: the coverage's whole."""
        steps = {"step": self.steps(), "save": self._save_steps("save"), "local_save": self._save_steps("local_save")}
        loads = [f"load {a}" for a in range(1, min(self.max_strikes, self.max_restarts) + 1)]
        return {(k.label, str(s)) for k in self.kinds for s in steps.get(k.trigger, ())} | {
            (k.label, a) for k in self.kinds if k.trigger == "load" for a in loads}

    def _trigger_step(self, kind: Kind, step: int, last: int) -> int | None:
        """Where the kind fires when drawn at `step` after a strike at `last`: that step, or for a save kill
        the first save step from there (else the last save step not before `last`; None if none is)."""
        if kind.trigger == "step":
            return max(step, last)
        reachable = [s for s in self._save_steps(kind.trigger) if s >= last]
        return next((s for s in reachable if s >= step), reachable[-1] if reachable else None)

    def _attempt_seals(self, before: Progress, reached: int, killed_save: int | None) -> Progress:
        """The checkpoints an attempt that resumed from `before` surely sealed, up to step `reached`."""
        start = before.resume
        if self.async_save:  # sealed when the next save began, at the latest
            sealed = {c for c in self.persistent_steps() if start < c and c + (self.save_interval or 0) <= reached}
        else:
            sealed = {c for c in self.persistent_steps() if start < c <= reached and c != killed_save}
        local = {c for c in self.local_steps() if start < c <= reached and c != killed_save}
        return Progress(self._kept(before.persistent | sealed), before.local | local)

    def _kept(self, persistent: frozenset[int] | set[int]) -> frozenset[int]:
        """What retention keeps of the checkpoints surely sealed: the newest most_recent_k (a newer one that was
        sealed but not surely so only makes the resume newer)."""
        return frozenset(sorted(persistent)[-self.most_recent_k:] if self.most_recent_k > 0 else persistent)

    def schedule(self, strikes: Iterable[tuple[Kind, int, int]], loads: Iterable[tuple[Kind, int]]) -> Schedule:
        """A drawn schedule made valid: strikes (kind, rank, step) in attempt order, each at a step no earlier
        than the one before (its attempt reaches it), a load kill only once a checkpoint exists; load faults
        (kind, attempt) at an attempt that exists and has what they break."""
        queue, at_load = list(strikes), _by_attempt(loads)
        faults: list[Fault] = []
        progress, last, first_reached, resumes = Progress(), 1, None, []
        for attempt in range(self.max_strikes + 1):
            progress = self._load_faults(attempt, at_load.get(attempt, ()), progress, faults)
            resumes.append(progress.resume)
            if attempt == self.max_strikes or attempt > self.max_restarts:
                break
            strike = self._next_strike(queue, attempt, last, progress)
            if strike is None:
                break
            faults.append(strike)
            if strike.at_step is not None:  # a load kill computes nothing
                last = strike.at_step
                reached = strike.at_step - (not strike.kind.reaches_its_step)
                saving = strike.kind.trigger != "step"  # a save kill: its save began (a hang's may not have)
                progress = self._attempt_seals(progress, reached if saving else strike.at_step - 1, strike.at_step if saving else None)
                first_reached = reached if first_reached is None else first_reached
        return Schedule(tuple(faults), self._lost_allowed(faults, first_reached, resumes))

    def _next_strike(self, queue: list[tuple[Kind, int, int]], attempt: int, last: int, progress: Progress) -> Fault | None:
        while queue:
            kind, rank, step = queue.pop(0)
            if kind.trigger == "load":  # the kill strikes inside a persistent checkpoint's load
                if attempt and max(progress.persistent, default=0) > max(progress.local, default=0):
                    return Fault(kind, rank, attempt, None)
                continue
            at = self._trigger_step(kind, step, last)
            if at is not None:
                return Fault(kind, rank, attempt, at)
        return None

    def _load_faults(self, attempt: int, kinds: Iterable[Kind], progress: Progress, faults: list[Fault]) -> Progress:
        """The attempt's non-killing load faults that find what they break; the progress after them."""
        if attempt == 0 or attempt > self.max_restarts:
            return progress
        for kind in {k.type: k for k in reversed(list(kinds))}.values():  # one of each type: the first drawn
            if kind.type == "checkpoint_corrupt" and progress.persistent:
                progress = replace(progress, persistent=progress.persistent - {max(progress.persistent)})
            elif kind.type == "local_checkpoint_lost" and progress.local:
                progress = replace(progress, local=frozenset())
            else:
                continue
            faults.append(Fault(kind, 0, attempt, None))
        return progress

    def _lost_allowed(self, faults: list[Fault], reached: int | None, resumes: list[int]) -> int:
        """The first strike's lost steps: from the step it reached back to what the first restart that loads
        resumes from (a restart killed inside its load does not load)."""
        if reached is None:
            return 0
        killed_loads = {f.attempt for f in faults if f.kind.trigger == "load" and f.kind.kills}
        attempt = next((a for a in range(1, len(resumes)) if a not in killed_loads), len(resumes) - 1)
        return reached - resumes[attempt]

    def canonical(self) -> Schedule:
        """The schedule a person writes first, judged before any drawn one: the first step kind kills rank 0
        right after the first persistent checkpoint (the first step a resume computes again; a local one
        without persistent ones), or at step 1 without any."""
        kind = next(k for k in self.kinds if k.kills and k.trigger != "load")
        first = min(self.persistent_steps() or self.local_steps(), default=0)
        return self.schedule([(kind, 0, min(first + 1, self.train_iters))], [])

    def strategy(self) -> st.SearchStrategy[Schedule]:
        """Schedules as hypothesis draws and shrinks them: the first strike at a step (attempt 0 has no
        restart's load), up to max_strikes - 1 more, up to two load faults at restarts."""
        ranks, steps = st.integers(0, self.world_size - 1), st.sampled_from(self.steps())
        killers = [k for k in self.kinds if k.kills]
        first = st.tuples(st.sampled_from([k for k in killers if k.trigger != "load"]), ranks, steps)
        strike = st.tuples(st.sampled_from(killers), ranks, steps)
        benign = [k for k in self.kinds if not k.kills]
        loads = st.lists(st.tuples(st.sampled_from(benign), st.integers(1, self.max_strikes)), max_size=2) if benign else st.just([])
        more = st.lists(strike, max_size=self.max_strikes - 1)
        return st.builds(lambda f, m, lo: self.schedule([f, *m], lo), first, more, loads)


def _by_attempt(loads: Iterable[tuple[Kind, int]]) -> dict[int, list[Kind]]:
    out: dict[int, list[Kind]] = {}
    for kind, attempt in loads:
        out.setdefault(attempt, []).append(kind)
    return out


@dataclass(frozen=True)
class Refusal:
    """Why a kind cannot be explored on a base (shown when --faults names it)."""

    label: str
    reason: str


@dataclass(frozen=True)
class Allowed:
    kinds: tuple[Kind, ...]
    refused: tuple[Refusal, ...] = field(default=())


def fault_registry() -> dict[str, frozenset[str]]:
    """Every fault type of the registry, with the fields it takes: all explore knows of the registry."""
    from chaos.faults.registry import FAULT_KINDS

    return {get_args(kind.model_fields["type"].annotation)[0]: frozenset(kind.model_fields) for kind in FAULT_KINDS}


def allowed_kinds(base: Scenario, registry: dict[str, frozenset[str]]) -> Allowed:
    """The kinds this base can be broken with, each checked against the registry (its type and fields), and
    why the others cannot."""
    if base.command is not None:
        outside = [k for k in COMMAND_KINDS if k.type in registry]
        why = "a `command`'s ranks run none of this project's hooks: only a signal from outside reaches them"
        return Allowed(tuple(outside), tuple(Refusal(k.label, why) for k in KINDS if k not in outside))
    cfg, kinds, refused = base.config, [], []
    reasons = {
        "save": None if cfg.checkpoint.save_interval else "the base saves no checkpoints (checkpoint.save_interval)",
        "local_save": None if cfg.checkpoint.local else "the base saves no local checkpoints",
        "load": None if base.max_restarts and cfg.checkpoint.save_interval else "a restart's load needs max_restarts >= 1 and checkpoints",
    }
    hung = base.launcher == "ft_launcher" and cfg.ft.enable_ft_package and base.ft.rank_heartbeat_timeout is not None
    for kind in KINDS:
        fields = registry.get(kind.type)
        why = reasons.get(kind.trigger)
        if fields is None or not {name for name, _ in kind.own} <= fields:
            why = "not in the fault registry"
        elif kind.type == "rank_hung" and not hung:
            why = "nothing detects a hang here (needs ft_launcher, ft.enable_ft_package and rank_heartbeat_timeout)"
        elif kind.type == "local_checkpoint_lost" and not cfg.checkpoint.local:
            why = "the base saves no local checkpoints"
        if why:
            refused.append(Refusal(kind.label, why))
        else:
            kinds.append(kind)
    return Allowed(tuple(kinds), tuple(refused))


def space_of(base: Scenario, kinds: tuple[Kind, ...], observed: Observed | None = None) -> Space:
    """Our trainer's space from its config; a `command`'s from what its fault-free run showed (`observed`)."""
    if observed is not None:
        return Space(
            world_size=base.world_size, train_iters=observed.train_iters, save_interval=save_interval(observed.saves),
            local_interval=None, async_save=observed.async_save, max_restarts=base.max_restarts, kinds=kinds,
            dense=not observed.saves,
        )
    c = base.config.checkpoint
    return Space(
        world_size=base.world_size, train_iters=base.config.train.train_iters, save_interval=c.save_interval,
        local_interval=c.non_persistent_save_interval if c.local else None, async_save=c.async_save,
        max_restarts=base.max_restarts, kinds=kinds, most_recent_k=c.most_recent_k,
    )


def save_interval(saves: tuple[int, ...]) -> int | None:
    """The interval of a command's observed saves: the first, when every save but a final one is a multiple of it."""
    if not saves:
        return None
    if any(s % saves[0] for s in saves[:-1]):
        raise BadInput(f"its fault-free run saved at steps {list(saves)}: explore models saves at a fixed interval")
    return saves[0]
