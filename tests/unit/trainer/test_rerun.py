"""The rerun state machine's decisions, rank by rank, without processes: transitions one by one, then
hypothesis over loss sequences (no sequence crashes it or lets simulated ranks disagree)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.resiliency.rerun import (
    SPIKY_SAMPLES,
    Action,
    Diagnosis,
    ErrorInjector,
    RerunMachine,
    RerunMode,
    RerunState,
    SpikyTracker,
    Vote,
)

NAN = math.nan


def world(n: int, mode: RerunMode = RerunMode.VALIDATE_RESULTS, node: str = "a", **kw) -> list[RerunMachine]:
    return [RerunMachine(mode, r, f"{node}/cpu:{r}", **kw) for r in range(n)]


def compute(machines: list[RerunMachine], values: list[float]) -> Action:
    """One computation on every rank: record, gather, decide; every rank must decide the same."""
    reports = [m.record(v) for m, v in zip(machines, values, strict=True)]
    actions = [m.decide(reports) for m in machines]
    assert all(a == actions[0] for a in actions), actions
    assert len({m.state for m in machines}) == 1
    return actions[0]


def step(machines: list[RerunMachine], iteration: int, values: list[float]) -> Action:
    for m in machines:
        m.start_step(iteration)
    return compute(machines, values)


def warm(machines: list[RerunMachine]) -> None:
    """The first step of a process is never validated (Megatron): get past it."""
    assert step(machines, 1, [NAN] * len(machines)).kind == "proceed"


def saved(machines: list[RerunMachine]) -> list[dict]:
    """Each rank's state as an exit-16 checkpoint holds it."""
    return [m.state_dict() for m in machines]


def resume(states: list[dict], node: str, mode: RerunMode = RerunMode.VALIDATE_RESULTS, **kw) -> list[RerunMachine]:
    """New processes on `node` loading each rank's checkpointed state."""
    fresh = world(len(states), mode, node, **kw)
    for state, new in zip(states, fresh, strict=True):
        new.load_state_dict(state)
    return fresh


# ------------------------------------------------------------------------------------------ transitions
def test_a_good_step_goes_initial_run_then_idle() -> None:
    ms = world(2)
    warm(ms)
    for m in ms:
        m.start_step(2)
    assert ms[0].state is RerunState.INITIAL_RUN
    action = compute(ms, [5.0, 5.1])
    assert (action.kind, action.state, action.noteworthy) == ("proceed", RerunState.IDLE, False)


def test_the_first_step_of_a_process_is_not_validated() -> None:
    ms = world(2)
    assert step(ms, 7, [NAN, NAN]).kind == "proceed"
    assert step(ms, 8, [NAN, 1.0]).kind == "rerun"


def test_a_failed_check_on_one_rank_reruns_every_rank_in_place() -> None:
    ms = world(3)
    warm(ms)
    action = step(ms, 2, [1.0, NAN, 1.0])
    assert (action.kind, action.state, action.flagged) == ("rerun", RerunState.RERUNNING_IN_PLACE, (1,))


def test_a_different_rerun_result_is_a_transient_error_exit_17_without_checkpoint() -> None:
    ms = world(2)
    warm(ms)
    step(ms, 2, [1.0, NAN])
    action = compute(ms, [1.0, 2.0])
    assert (action.code, action.diagnosis, action.save, action.state) == (
        17, Diagnosis.TRANSIENT_ERROR, False, RerunState.STOPPED,
    )


def test_a_reproduced_result_saves_and_exits_16() -> None:
    ms = world(2)
    warm(ms)
    step(ms, 2, [1.0, NAN])
    action = compute(ms, [1.0, NAN])
    assert (action.code, action.diagnosis, action.save, action.state) == (
        16, Diagnosis.REPRODUCIBLE, True, RerunState.WILL_RERUN_FROM_CHECKPOINT,
    )


@pytest.mark.parametrize(("rerun_value", "diagnosis"), [(2.0, Diagnosis.PERSISTENT_ERROR), (NAN, Diagnosis.CORRECT_RESULT)])
def test_the_rerun_on_another_node_attributes_the_result_exit_17(rerun_value: float, diagnosis: Diagnosis) -> None:
    ms = world(2)
    warm(ms)
    step(ms, 2, [1.0, NAN])
    compute(ms, [1.0, NAN])
    ms = resume(saved(ms), "b")
    for m in ms:
        m.start_step(2)
    assert ms[0].state is RerunState.RERUNNING_FROM_CHECKPOINT
    action = compute(ms, [1.0, rerun_value])
    assert (action.code, action.diagnosis, action.save) == (17, diagnosis, False)


def test_the_same_node_exits_16_again_up_to_the_bound_then_17() -> None:
    ms = world(2, max_same_node_reruns=2)
    warm(ms)
    step(ms, 2, [1.0, NAN])
    compute(ms, [1.0, NAN])
    codes, checkpoint = [], saved(ms)
    for _ in range(4):
        ms = resume(checkpoint, "a", max_same_node_reruns=2)
        action = step(ms, 2, [1.0, NAN])
        codes.append((action.code, action.diagnosis, action.save))
        if action.save:
            checkpoint = saved(ms)
    assert codes == [
        (16, Diagnosis.REPRODUCIBLE, True), (16, Diagnosis.REPRODUCIBLE, True),
        (17, Diagnosis.SAME_NODE_LOOP, False), (17, Diagnosis.SAME_NODE_LOOP, False),
    ]


def test_after_the_same_node_another_node_still_attributes() -> None:
    ms = world(2)
    warm(ms)
    step(ms, 2, [1.0, NAN])
    compute(ms, [1.0, NAN])
    ms = resume(saved(ms), "a")
    assert step(ms, 2, [1.0, NAN]).code == 16
    ms = resume(saved(ms), "b")
    assert step(ms, 2, [1.0, 3.0]).diagnosis is Diagnosis.PERSISTENT_ERROR


def test_a_checkpoint_must_rerun_the_step_it_was_saved_for() -> None:
    ms = world(1)
    warm(ms)
    step(ms, 2, [NAN])
    compute(ms, [NAN])
    ms = resume(saved(ms), "b")
    with pytest.raises(RuntimeError, match="rerun step 2, not 3"):
        ms[0].start_step(3)


def test_spiky_loss_transient_and_reproduced_both_continue() -> None:
    ms = world(1, check_spiky=True, spiky=SpikyTracker(10.0))
    warm(ms)
    for i in range(SPIKY_SAMPLES):
        step(ms, 2 + i, [5.0])
    assert step(ms, 200, [50.0]).kind == "rerun"
    transient = compute(ms, [5.0])
    assert (transient.kind, transient.diagnosis) == ("proceed", Diagnosis.TRANSIENT_ERROR)
    assert step(ms, 201, [60.0]).kind == "rerun"
    reproduced = compute(ms, [60.0])
    assert (reproduced.kind, reproduced.diagnosis) == ("proceed", Diagnosis.REPRODUCIBLE)


def test_a_fatal_failure_outranks_a_spike_on_another_rank() -> None:
    ms = world(2, check_spiky=True, spiky=SpikyTracker(10.0))
    warm(ms)
    for i in range(SPIKY_SAMPLES):
        step(ms, 2 + i, [5.0, 5.0])
    step(ms, 200, [NAN, 500.0])
    assert compute(ms, [NAN, 500.0]).code == 16


def test_spiky_tracker_follows_megatron() -> None:
    t = SpikyTracker(10.0)
    assert not any(t.is_spike(v) for v in [1.0, -3.0, *[2.0] * (SPIKY_SAMPLES - 2)])
    assert t.max_value == 3.0
    assert not t.is_spike(29.9)
    assert t.is_spike(-30.0)
    assert not t.is_spike(math.inf) and not t.is_spike(NAN)


def test_disabled_mode_stops_every_rank_with_an_error_naming_rank_and_iteration() -> None:
    ms = world(2, RerunMode.DISABLED)
    action = step(ms, 1, [NAN, 2.0])  # disabled mode validates from the first step, as Megatron does
    assert (action.kind, action.diagnosis, action.flagged) == ("error", Diagnosis.RERUN_DISABLED, (0,))
    assert "Rank 0, iteration 1: Unexpected result nan" in action.message


def test_disabled_mode_ignores_a_pending_rerun_in_a_checkpoint() -> None:
    ms = world(1)
    warm(ms)
    step(ms, 2, [NAN])
    compute(ms, [NAN])
    off = world(1, RerunMode.DISABLED)
    off[0].load_state_dict(ms[0].state_dict())
    assert off[0].state is RerunState.IDLE


def test_report_determinism_stats_reruns_every_step_and_reports_the_spread() -> None:
    ms = world(2, RerunMode.REPORT_DETERMINISM_STATS)
    assert step(ms, 1, [4.0, 2.0]).kind == "rerun"
    action = compute(ms, [4.0, 2.2])
    assert action.kind == "proceed" and action.noteworthy
    assert action.values == (0.0, pytest.approx(0.2 / 2.1))


def test_an_illegal_transition_is_refused() -> None:
    m = world(1)[0]
    m.start_step(1)
    with pytest.raises(RuntimeError, match="no transition initial_run -> initial_run"):
        m.start_step(2)


@pytest.mark.parametrize(
    ("kind", "codes"),
    [
        (Diagnosis.TRANSIENT_ERROR, [(17, Diagnosis.TRANSIENT_ERROR)]),
        (Diagnosis.PERSISTENT_ERROR, [(16, Diagnosis.REPRODUCIBLE), (17, Diagnosis.PERSISTENT_ERROR)]),
        (Diagnosis.CORRECT_RESULT, [(16, Diagnosis.REPRODUCIBLE), (17, Diagnosis.CORRECT_RESULT)]),
    ],
)
def test_error_injection_gives_megatrons_diagnoses(kind: Diagnosis, codes: list) -> None:
    inj = ErrorInjector(1, kind, seed=3, world_size=2)
    ms = world(2, injector=inj)
    warm(ms)
    assert step(ms, 2, [5.0, 5.0]).kind == "rerun"
    seen = []
    action = compute(ms, [5.0, 5.0])
    seen.append((action.code, action.diagnosis))
    if action.code == 16:
        ms = resume(saved(ms), "b", injector=inj)
        action = step(ms, 2, [5.0, 5.0])
        seen.append((action.code, action.diagnosis))
    assert seen == codes


def test_error_injection_draws_the_same_victim_on_every_rank() -> None:
    draws = [[ErrorInjector(4, Diagnosis.TRANSIENT_ERROR, 9, 8).victim(i) for i in range(200)] for _ in range(3)]
    assert draws[0] == draws[1] == draws[2]
    hits = [v for v in draws[0] if v is not None]
    assert 20 < len(hits) < 90 and set(hits) <= set(range(8))


def test_state_round_trips_through_plain_types() -> None:
    ms = world(1, check_spiky=True)
    warm(ms)
    step(ms, 2, [NAN])
    compute(ms, [NAN])
    state = ms[0].state_dict()
    assert all(isinstance(v, (str, int, float, type(None))) for v in state.values())
    again = resume(saved(ms), "a", check_spiky=True)[0]
    assert again.state_dict() == state


# ------------------------------------------------------------------------------------------ properties
LOSSES = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32), st.sampled_from([NAN, 5.0, 1e6]))


@dataclass(frozen=True)
class Plan:
    mode: RerunMode
    ranks: int
    spiky: bool
    limit: int
    steps: list[list[tuple[float, bool]]]
    """Per step, per rank: (initial loss, whether every recomputation gives the same loss)."""
    nodes: list[str]
    """The node identity of each resume after an exit 16."""


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    ranks = draw(st.integers(1, 4))
    row = st.lists(st.tuples(LOSSES, st.booleans()), min_size=ranks, max_size=ranks)
    return Plan(
        draw(st.sampled_from(list(RerunMode))), ranks, draw(st.booleans()), draw(st.integers(0, 3)),
        draw(st.lists(row, min_size=1, max_size=12)), draw(st.lists(st.sampled_from(["a", "b"]), max_size=6)),
    )


def drive(plan: Plan) -> list[Action]:
    """Run the plan through simulated ranks (resuming after 16 while nodes last); every decision is checked equal."""
    kw = {"check_spiky": plan.spiky, "spiky": SpikyTracker(2.0), "max_same_node_reruns": plan.limit}
    ms = world(plan.ranks, plan.mode, "a", **kw)
    nodes, actions, i = list(plan.nodes), [], 0
    while i < len(plan.steps):
        row = plan.steps[i]
        action = step(ms, i + 1, [v for v, _ in row])
        computation = 0
        while action.kind == "rerun":
            computation += 1
            assert computation < 2, "a step is rerun in place at most once"
            action = compute(ms, [v if same else v + 1.0 for v, same in row])
        actions.append(action)
        if action.kind in ("exit", "error") and not (action.code == 16 and nodes):
            break
        if action.code == 16:
            ms = resume(saved(ms), nodes.pop(0), plan.mode, **{**kw, "spiky": SpikyTracker(2.0)})
            continue
        i += 1
    return actions


@settings(max_examples=300, deadline=None)
@given(plans())
def test_no_loss_sequence_crashes_the_machine_or_splits_the_ranks(plan: Plan) -> None:
    actions = drive(plan)
    for a in actions:
        assert a.kind in ("proceed", "exit", "error")
        assert (a.code, a.kind) in {(None, "proceed"), (16, "exit"), (17, "exit"), (1, "error")}
        assert a.save == (a.code == 16)
    if plan.mode is not RerunMode.VALIDATE_RESULTS:
        assert all(a.code in (None, 1) for a in actions), "only validate_results exits 16 or 17"


@settings(max_examples=100, deadline=None)
@given(plans())
def test_finite_losses_never_stop_a_run_without_the_spiky_check(plan: Plan) -> None:
    finite = [[(v if math.isfinite(v) else 1.0, same) for v, same in row] for row in plan.steps]
    actions = drive(Plan(plan.mode, plan.ranks, False, plan.limit, finite, plan.nodes))
    assert all(a.kind == "proceed" for a in actions)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 3), st.integers(1, 4))
def test_the_same_node_loop_always_ends(limit: int, ranks: int) -> None:
    ms = world(ranks, max_same_node_reruns=limit)
    warm(ms)
    step(ms, 2, [NAN] * ranks)
    assert compute(ms, [NAN] * ranks).code == 16
    codes, checkpoint = [], saved(ms)
    while len(codes) < limit + 3:
        ms = resume(checkpoint, "a", max_same_node_reruns=limit)
        codes.append(step(ms, 2, [NAN] * ranks).code)
        if codes[-1] == 16:
            checkpoint = saved(ms)
    assert codes == [16] * limit + [17] * 3, "every landing past the bound exits 17, however often it restarts"


def test_votes_rank_fatal_outcomes_above_continuing() -> None:
    assert Vote.CONTINUE_REPRODUCED < Vote.TRANSIENT < Vote.REPRODUCED < Vote.SAME_NODE
