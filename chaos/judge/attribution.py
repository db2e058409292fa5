"""Did the stack name the right culprit, and was its restart decision right? Judged against the truth the
harness alone knows: the faults it injected (their rank, node, kind and time).

For every fault with a target, each source the run armed (chaos/judge/culprit.py, SOURCES) is *right* (every
claim it made from the fault on names the target), *wrong* (it named only others: a healthy rank or node
drained, the worst outcome), *mixed* (the target and others) or *silent*; with the time from the fault to its
first right claim. A claim names the target when it names its rank, or its node (a rank of that node counts
for a node fault). Claims count from the fault up to the next targeted fault.

The restart decision: a fault that a restart in place recovers from (a killed or hung rank, a lost node, a
transient error) wants a restart; one that follows the job (a persistent NaN on the same node: requeue it
elsewhere; a full disk: not until it is cleared) wants none; a fault with no target (a full disk) has its
decision judged and no culprit. The stack's decision is its first act after the fault: a restart (the
launcher's, or an in-process one), or none (the launcher's stop, or training going on); the trainer's exit
16 or 17 is a request the launcher may ignore. Pure functions of the run's events, claims and plan.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from chaos.judge.culprit import (
    CAUSES,
    FLIGHT_RECORDER,
    HANG,
    NAN,
    RANK_MONITOR,
    RERUN,
    SOURCES,
    SPIKE,
    STRAGGLE,
    STRAGGLER,
    rank_nodes,
)
from chaos.judge.verdicts import Verdict
from chaos.schema.expect import Expect, ExpectedCulprit
from runlog import names

Event = dict[str, Any]

RIGHT, WRONG, MIXED, SILENT = "right", "wrong", "mixed", "silent"
RESTART, NO_RESTART = "restart", "no restart"
CLAIM_SLACK_S = 0.5
"""A supervisor's fault is stamped when its signal went out; a claim about it can be stamped a little earlier."""

CRASH, DISK, NETWORK = "crash", "disk", "network"
FAULT_CAUSE = {
    "rank_hung": HANG, "collective_hang": HANG, "node_hung": HANG, "sigstop": HANG, "gil_deadlock": HANG,
    "network_partition": NETWORK, "slow_rank": STRAGGLE, "duty_cycle": STRAGGLE, "network_degraded": STRAGGLE,
    "nan_loss": NAN, "spiky_loss": SPIKE, "disk_full": DISK,
    "rank_killed": CRASH, "sigkill": CRASH, "segfault": CRASH, "abort": CRASH, "exception": CRASH,
    "node_killed": CRASH, "host_oom": CRASH, "gpu_oom": CRASH,
}
"""What each fault kind is, in the words of a claim's cause (a crash, a full disk and a partition have no
source that names them on CPU today, but a scenario may expect them)."""
EXPECTED_CAUSES = (*CAUSES, CRASH, DISK, NETWORK)
RESTART_RIGHT = {
    **dict.fromkeys(("rank_killed", "rank_hung", "collective_hang", "sigkill", "sigstop", "segfault", "abort", "exception",
                     "node_killed", "node_hung", "network_partition", "gil_deadlock", "host_oom"), RESTART),
    "disk_full": NO_RESTART,
}
"""The right decision per fault kind; nan_loss's depends on its persistence (``right_decision``)."""


@dataclass(frozen=True)
class SourceOutcome:
    source: str
    outcome: str
    named: tuple[str, ...]
    """Whom it named, in order ("rank 1", "node node1"), each once."""
    first_right_s: float | None
    causes: tuple[str, ...]


@dataclass(frozen=True)
class Decision:
    right: str
    observed: str | None
    how: str
    agrees: bool | None
    """None when no decision was seen."""


@dataclass(frozen=True)
class FaultAttribution:
    fault: str
    fault_id: str
    target_rank: int | None
    target_node: str | None
    cause: str | None
    attempt: int
    sources: tuple[SourceOutcome, ...]
    decision: Decision | None = None
    mono: float = field(default=0.0, compare=False)

    @property
    def targeted(self) -> bool:
        return self.target_rank is not None or self.target_node is not None

    def target(self) -> str:
        parts = ([f"rank {self.target_rank}"] if self.target_rank is not None else []) + ([f"node {self.target_node}"] if self.target_node else [])
        return " on ".join(parts) or "none"


def armed_sources(events: list[Event], trainer: dict[str, Any], launcher: str, flight_recorder: bool, command: bool) -> tuple[str, ...]:
    """The sources a run armed: the rank monitor (FT armed in the ranks, or a command under ft_launcher), the
    Flight Recorder (``flight_recorder``), the straggler detector and the rerun state machine (configured, or
    reporting)."""
    kinds = {e["event"] for e in events}
    armed = {
        RANK_MONITOR: bool(kinds & {names.FT_TIMEOUTS, names.FT_TIMEOUT}) or (command and launcher == "ft_launcher"),
        FLIGHT_RECORDER: flight_recorder,
        STRAGGLER: names.STRAGGLER_REPORT in kinds or trainer.get("nvrx_straggler.enabled") is True,
        RERUN: names.RERUN in kinds or trainer.get("rerun_state_machine.rerun_mode") in ("validate_results", "report_determinism_stats"),
    }
    return tuple(s for s in SOURCES if armed[s])


def attribute(events: list[Event], claims: list[Event], armed: tuple[str, ...],
              plan: list[dict[str, Any]] | None = None) -> list[FaultAttribution]:
    """Each targeted fault (its first ``fault_injected``) against the claims made from it on; ``plan``: the
    run's plan records (plan.json), whose fields a fault's event may not repeat (nan_loss's persistence)."""
    planned = {r.get("fault_id"): r for r in plan or []}
    faults = [{**planned.get(f["fault_id"], {}), **f} for f in _first_faults(events)]
    targeted = [f for f in faults if f.get("target_rank") is not None or f.get("target_node")]
    nodes = rank_nodes(events)
    out = []
    for fault in (f for f in faults if f in targeted or right_decision(f) is not None):
        later = [f["mono"] for f in targeted if f["mono"] > fault["mono"]]
        window = [c for c in claims if fault["mono"] - CLAIM_SLACK_S <= c["mono"] < min(later, default=float("inf"))]
        node = fault.get("target_node") or (fault.get("node") if fault["rank"] >= 0 else nodes.get((fault["attempt"], fault.get("target_rank"))))
        target = (fault.get("target_rank"), node if fault in targeted else None)
        outcomes = () if fault not in targeted else tuple(
            _outcome(s, [c for c in window if c["source"] == s], target, fault, nodes) for s in armed
        )
        out.append(FaultAttribution(
            fault["fault"], fault["fault_id"], target[0], target[1], FAULT_CAUSE.get(fault["fault"]), fault["attempt"],
            outcomes, _decision(fault, events), fault["mono"],
        ))
    return out


NOT_FAILURES = frozenset({"node_rejoin", "sigterm", "slurm_requeue", "slurm_kill_step"})
"""Faults with a target that break nothing to blame: a node coming back, a preemption's notice, a scheduler's act."""


def _first_faults(events: list[Event]) -> list[Event]:
    """Each fault's first ``fault_injected``, in time order (a persistent fault fires again and again)."""
    first: dict[str, Event] = {}
    for e in events:
        if e["event"] == names.FAULT_INJECTED and e.get("fault") not in (None, *NOT_FAILURES):
            fault_id = e.get("fault_id") or f"{e['fault']}@{e['mono']}"  # a writer of another kind may leave it out
            first.setdefault(fault_id, {**e, "fault_id": fault_id})
    return sorted(first.values(), key=lambda e: e["mono"])


def _names_target(claim: Event, target: tuple[int | None, str | None], nodes: dict[tuple[int, int], str]) -> bool:
    rank, node = target
    if rank is not None:
        return claim["culprit_rank"] == rank or (claim["culprit_rank"] is None and node is not None and claim["culprit_node"] == node)
    claimed_node = claim["culprit_node"] or nodes.get((claim.get("attempt", -1), claim["culprit_rank"]))
    return node is not None and claimed_node == node


def _who(claim: Event) -> str:
    return f"rank {claim['culprit_rank']}" if claim["culprit_rank"] is not None else f"node {claim['culprit_node']}"


def _outcome(source: str, claims: list[Event], target: tuple[int | None, str | None], fault: Event,
             nodes: dict[tuple[int, int], str]) -> SourceOutcome:
    right = [c for c in claims if _names_target(c, target, nodes)]
    wrong = [c for c in claims if not _names_target(c, target, nodes)]
    outcome = SILENT if not claims else MIXED if right and wrong else RIGHT if right else WRONG
    named = tuple(dict.fromkeys(_who(c) for c in claims))
    first = round(right[0]["mono"] - fault["mono"], 3) if right else None
    return SourceOutcome(source, outcome, named, first, tuple(dict.fromkeys(c["cause"] for c in claims)))


def right_decision(fault: Event) -> str | None:
    """What the stack should do about this fault: restart in place, or not; None where it is not judged."""
    if fault["fault"] == "nan_loss":
        return NO_RESTART if fault.get("persistence") == "persistent" else RESTART
    return RESTART_RIGHT.get(fault["fault"])


def _decision(fault: Event, events: list[Event]) -> Decision | None:
    """The launcher's next act after the fault (a restart, or its exit), or an in-process restart; the
    trainer's exit 16 or 17 before it is its request, which the launcher may follow or not (ft_launcher
    restarts on any failure: Megatron-LM #5281). A launcher that stopped and whose job was launched again
    (the FT plugin's job retry, a scheduler's requeue) restarted it in place, on the same node, or requeued it
    elsewhere, under another node identity: for a persistent fault, the right call. A full disk wants no restart until it
    is cleared: one after its ``duration_s`` is right."""
    right = right_decision(fault)
    if right is None:
        return None
    cleared = fault["mono"] + fault["duration_s"] if fault["fault"] == "disk_full" and fault.get("duration_s") is not None else None
    right = f"{right} until cleared" if cleared is not None else right
    asked = ""
    for e in (e for e in events if e["mono"] >= fault["mono"] - CLAIM_SLACK_S):
        if e["event"] == names.EXIT and e.get("code") in (16, 17) and e["rank"] == 0:
            asked = f" after the trainer's exit {e['code']} ({e.get('diagnosis') or e.get('reason')})"
        elif e["event"] in (names.RESTART, names.INPROCESS_START) and (e["event"] == names.RESTART or e.get("inprocess_iteration", 0) > 0):
            who = "the launcher restarted the workers" if e["event"] == names.RESTART else "NVRx's in-process restart re-entered the training function"
            if cleared is not None:
                late = e["mono"] >= cleared
                when = "after" if late else "before"
                return Decision(right, RESTART, f"{who} {e['mono'] - fault['mono']:.1f} s after the fault, {when} the disk was cleared", late)
            return Decision(right, RESTART, f"{who}{asked}", right == RESTART)
        elif e["event"] == names.LAUNCHER_EXIT:
            code = e.get("code")
            if code != 0 and (where := _relaunched_on(fault, e, events)) is not None:
                how = f"the launcher stopped (exit {code}){asked} and the job was launched again on {where}"
                done = NO_RESTART if where.startswith("another") else RESTART  # a requeue elsewhere restarts nothing in place
                return Decision(right, done, how, right.startswith(done))
            how = "training went on to the end" if code == 0 and not asked else f"the launcher stopped (exit {code}){asked}"
            return Decision(right, NO_RESTART, how, right.startswith(NO_RESTART))
    return Decision(right, None, "no decision seen", None)


def _relaunched_on(fault: Event, stop: Event, events: list[Event]) -> str | None:
    """Where the job was launched again after the launcher's `stop` (the FT plugin's job retry, a requeue):
    `the same node`, `another node (NAME)` when its ranks started under another node identity than the
    fault's; None when it was not launched again."""
    launch = next((e for e in events if e["event"] == names.LAUNCH and e["mono"] >= stop["mono"]), None)
    if launch is None:
        return None
    starts = [e for e in events if e["event"] == names.RUN_START and e["attempt"] == launch["attempt"] and e["mono"] >= launch["mono"]]
    node = starts[0].get("node") if starts else None
    return f"another node ({node})" if node and fault.get("node") and node != fault["node"] else "the same node"


def describe(a: FaultAttribution) -> list[str]:
    """The attribution of one fault as report lines."""
    on = f"on {a.target()}" if a.targeted else "(no target)"
    lines = [f"{a.fault} ({a.fault_id}) {on}: cause {a.cause or 'unclassified'}"]
    for s in a.sources:
        first = f", first right claim after {s.first_right_s:.2f} s" if s.first_right_s is not None else ""
        named = f" (named {', '.join(s.named)}; cause {', '.join(s.causes)})" if s.named else ""
        lines.append(f"  {s.source}: {s.outcome}{named}{first}")
    if not a.sources and a.targeted:
        lines.append("  no source of claims was armed")
    if a.decision is not None:
        verdict = {True: "right", False: "WRONG", None: "not seen"}[a.decision.agrees]
        lines.append(f"  restart decision: {a.decision.observed or 'none'} ({a.decision.how}); right: {a.decision.right} -> {verdict}")
    return lines


def culprit_verdict(wanted: ExpectedCulprit, attributions: list[FaultAttribution], claims: list[Event],
                    armed: tuple[str, ...]) -> Verdict:
    """``expect.culprit``: the named sources (else any, with none naming another) name the expected culprit,
    from the first targeted fault on (the whole run without one)."""
    first = next((a for a in attributions if a.targeted), None)
    rank, node = wanted.rank, wanted.node
    if rank is None and node is None and first is not None:
        rank, node = first.target_rank, first.target_node
    start = first.mono - CLAIM_SLACK_S if first is not None else float("-inf")
    window = [c for c in claims if c["mono"] >= start]
    sources = tuple(wanted.sources) if wanted.sources else armed
    fault = {"mono": first.mono if first else (window[0]["mono"] if window else 0.0)}
    outcomes = [_outcome(s, [c for c in window if c["source"] == s], (rank, node), fault, {}) for s in sources]
    if rank is None and node is None:  # a cause alone: every claim is about the fault
        outcomes = [SourceOutcome(o.source, RIGHT if o.named else SILENT, o.named, None, o.causes) for o in outcomes]
    cause_ok = [o for o in outcomes if o.outcome == RIGHT and (wanted.cause is None or wanted.cause in o.causes)]
    if wanted.sources:
        passed = len(cause_ok) == len(outcomes)
    else:
        passed = bool(cause_ok) and not any(o.outcome in (WRONG, MIXED) for o in outcomes)
    target = " on ".join(([f"rank {rank}"] if rank is not None else []) + ([f"node {node}"] if node else [])) or "the fault"
    cause = f" as {wanted.cause}" if wanted.cause else ""
    observed = "; ".join(
        f"{o.source}: {o.outcome}" + (f" ({', '.join(o.named)}; {', '.join(o.causes)})" if o.named else "") for o in outcomes
    ) or "no source armed"
    expected = f"each of {', '.join(sources)} names {target}{cause}" if wanted.sources else f"a source names {target}{cause}, none another"
    return Verdict("culprit", expected, observed, passed)


def restart_verdict(wanted: bool, attributions: list[FaultAttribution]) -> Verdict:
    """``expect.restart_right``: every judged fault's decision agrees with the one it wants (or, false, not)."""
    judged = [a for a in attributions if a.decision is not None]
    observed = "; ".join(
        f"{a.fault_id} {a.fault}: {a.decision.observed or 'none seen'} ({a.decision.how}), wants {a.decision.right}"
        for a in judged if a.decision is not None
    ) or "no fault whose decision is judged"
    right = bool(judged) and all(a.decision is not None and a.decision.agrees for a in judged)
    expected = "the stack's restart decision is right for every fault" if wanted else "a restart decision is wrong"
    return Verdict("restart_right", expected, observed, right == wanted)


def attribution_verdicts(expect: Expect, attributions: list[FaultAttribution], claims: list[Event],
                         armed: tuple[str, ...]) -> list[Verdict]:
    """The attribution expectations the scenario states (none: the attribution is reported, never judged)."""
    verdicts = []
    if expect.culprit is not None:
        verdicts.append(culprit_verdict(expect.culprit, attributions, claims, armed))
    if expect.restart_right is not None:
        verdicts.append(restart_verdict(expect.restart_right, attributions))
    return verdicts


def attribution_record(attributions: list[FaultAttribution], armed: tuple[str, ...], claims: list[Event],
                       notes: list[str]) -> dict[str, Any]:
    """The journal's ``attribution``: the sources armed, each targeted fault's outcomes, why a source could
    not be read, and its report lines."""
    return {
        "armed": list(armed),
        "claims": len(claims),
        "faults": [asdict(a) for a in attributions],
        "notes": notes,
        "lines": [line for a in attributions for line in describe(a)] + notes,
    }
