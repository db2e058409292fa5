"""Culprit claims read from each source's own words, and judged against the injected fault
(chaos/judge/culprit.py, chaos/judge/attribution.py), from hand-built events; the rank monitor's lines are
NVRx 0.4.1's as a rank_hung run printed them."""

from __future__ import annotations

import typing

import pytest

from chaos.judge import attribution, culprit
from chaos.judge.attribution import MIXED, NO_RESTART, RESTART, RIGHT, SILENT, WRONG, attribute
from chaos.schema.expect import CulpritCause, CulpritSource, Expect, ExpectedCulprit
from runlog.reader import read_events

HB0 = "[2026-12-06 03:53:49,737] [WARNING] [RankMonServer7364@vm:0] Did not get subsequent heartbeat. Waited 3.00 seconds."
HB1 = "[2026-12-06 03:53:49,755] [WARNING] [RankMonServer7365@vm:1] Did not get subsequent heartbeat. Waited 3.00 seconds."
SECTION1 = "[2026-12-06 03:53:49,755] [WARNING] [RankMonServer7365@vm:1] Section 'step' has been open for 3.04 seconds. Timeout is 3.00"


def _hang(event, *lines: str) -> list[dict]:
    return [
        event("run_start", 0.5, node="vm"), event("run_start", 0.5, rank=1, node="vm"),
        event("ft_timeouts", 0.6, heartbeat={}, sections={}, calculated=False),
        event("fault_injected", 2.0, rank=1, node="vm", fault="rank_hung", fault_id="f0", target_rank=1),
        *(event("ft_timeout", 5.0 + i / 100, rank=-1, line=line) for i, line in enumerate(lines)),
        event("restart", 5.1, rank=-1, attempt=1, attempts_left=2),
    ]


def _judged(events: list[dict]) -> list[attribution.FaultAttribution]:
    found = [{**c.fields(), "event": "culprit_claim", "rank": -1, "mono": mono, "attempt": c.attempt or 0}
             for c, _, mono in culprit.claims(events)]
    return attribute(events, found, attribution.armed_sources(events, {}, "ft_launcher", False, False))


def test_the_rank_monitor_blaming_the_waiting_peer_too_is_mixed(event):
    (a,) = _judged(_hang(event, HB0, HB1))
    (monitor,) = a.sources
    assert (monitor.source, monitor.outcome, monitor.named) == ("rank_monitor", MIXED, ("rank 0", "rank 1"))
    assert monitor.first_right_s == pytest.approx(3.01)
    assert a.decision is not None and (a.decision.observed, a.decision.right, a.decision.agrees) == (RESTART, RESTART, True)


def test_a_section_timeout_names_its_rank_and_section_and_only_that_rank_is_right(event):
    (claim, _, _), = culprit.claims(_hang(event, SECTION1))
    assert (claim.source, claim.culprit_rank, claim.culprit_node, claim.cause) == ("rank_monitor", 1, "vm", "hang")
    assert claim.detail.startswith("section 'step' timed out")
    (a,) = _judged(_hang(event, SECTION1))
    assert a.sources[0].outcome == RIGHT


def test_a_source_naming_only_a_healthy_rank_is_wrong_and_an_armed_one_that_said_nothing_is_silent(event):
    events = _hang(event, HB0) + [event("straggler_report", 3.0, kind="section:forward", scores={}, flagged=[], iteration=3)]
    (a,) = _judged(events)
    outcomes = {s.source: s.outcome for s in a.sources}
    assert outcomes == {"rank_monitor": WRONG, "straggler": SILENT}


def test_straggler_reports_claim_each_flagged_rank_once_with_its_scores(event):
    report = {"kind": "section:forward", "scores": {"relative": {"0": 1.0, "1": 0.05}}, "flagged": [1]}
    events = [event("run_start", 0.5, rank=1, node="vm"),
              event("fault_injected", 1.0, rank=1, node="vm", fault="slow_rank", fault_id="f0", target_rank=1),
              event("straggler_report", 2.0, iteration=31, **report), event("straggler_report", 3.0, iteration=32, **report)]
    (claim, _, mono), = culprit.claims(events)
    assert (claim.source, claim.culprit_rank, claim.cause, mono) == ("straggler", 1, "straggler", 2.0)
    assert "relative 0.05" in claim.detail
    (a,) = _judged(events)
    assert [(s.source, s.outcome, s.first_right_s) for s in a.sources] == [("straggler", RIGHT, 1.0)]


def test_the_rerun_state_machine_names_the_flagged_rank_then_its_persistence_on_another_node(event):
    """nan_persistent: rank 1 flagged in attempt 0 on node a; resumed on node b nothing is flagged, and the
    diagnosis names the rank flagged before, on the node it ran on then."""
    events = [
        event("run_start", 0.5, rank=1, node="a"),
        event("fault_injected", 1.0, rank=1, node="a", fault="nan_loss", fault_id="f0", target_rank=1, persistence="persistent"),
        event("rerun", 1.1, state="rerunning_in_place", diagnosis=None, flagged=[1], check="nan", message="rerunning"),
        event("rerun", 1.2, state="will_rerun_from_checkpoint", diagnosis="reproducible", flagged=[1], check="nan", message="m"),
        event("exit", 1.3, reason="rerun", code=16, diagnosis="reproducible"),
        event("launcher_exit", 1.5, rank=-1, code=1),
        event("run_start", 2.0, attempt=1, rank=1, node="b"),
        event("rerun", 2.5, attempt=1, state="stopped", diagnosis="persistent_error", flagged=[], check="nan", message="m"),
    ]
    found = [(c.culprit_rank, c.culprit_node, c.cause, c.persistence, c.attempt) for c, _, _ in culprit.claims(events)]
    assert found == [(1, "a", "nan", None, 0), (1, "a", "nan", "persistent", 0), (1, "a", "nan", "persistent", 1)]
    (a,) = _judged(events)
    assert [s.outcome for s in a.sources] == [RIGHT]
    assert a.decision is not None and (a.decision.observed, a.decision.right) == (NO_RESTART, NO_RESTART)
    assert a.decision.how == "the launcher stopped (exit 1) after the trainer's exit 16 (reproducible)"


def test_exit_16_that_the_launcher_answers_with_a_restart_on_the_same_node_is_the_wrong_call(event):
    """nan_persistent_same_node: the trainer asks to resume elsewhere, ft_launcher restarts it in place."""
    events = [
        event("fault_injected", 1.0, rank=0, node="a", fault="nan_loss", fault_id="f0", target_rank=0),
        event("exit", 1.3, reason="rerun", code=16, diagnosis="reproducible"),
        event("restart", 1.5, rank=-1, attempt=1, attempts_left=1),
    ]
    (transient,) = attribute(events, [], ())  # the event alone does not say it is persistent: the plan does
    assert transient.decision is not None and transient.decision.right == RESTART
    (a,) = attribute(events, [], (), plan=[{"fault_id": "f0", "type": "nan_loss", "persistence": "persistent"}])
    assert a.decision is not None and (a.decision.observed, a.decision.right, a.decision.agrees) == (RESTART, NO_RESTART, False)
    assert not attribution.restart_verdict(True, [a]).passed and attribution.restart_verdict(False, [a]).passed


def test_a_node_fault_is_named_by_a_claim_of_a_rank_on_that_node(event):
    events = [
        event("run_start", 0.5, rank=0, node="node0"), event("run_start", 0.5, rank=1, node="node1"),
        event("ft_timeouts", 0.6, heartbeat={}, sections={}, calculated=False),
        event("fault_injected", 2.0, rank=-1, fault="network_partition", fault_id="f0", target_rank=None, target_node="node1"),
        event("ft_timeout", 5.0, rank=-1, node="node1", line=HB1.replace("@vm", "@host")),
    ]
    (a,) = _judged(events)
    assert (a.target(), a.sources[0].outcome, a.cause) == ("node node1", RIGHT, "network")


def test_expect_culprit_passes_on_the_right_rank_and_fails_when_any_source_blames_another(event):
    mixed = _hang(event, HB0, HB1)
    for lines, passed in (((HB1,), True), ((HB0, HB1), False)):
        events = _hang(event, *lines)
        found = [{**c.fields(), "event": "culprit_claim", "rank": -1, "mono": mono} for c, _, mono in culprit.claims(events)]
        armed = attribution.armed_sources(events, {}, "ft_launcher", False, False)
        verdict = attribution.culprit_verdict(ExpectedCulprit(rank=1), attribute(events, found, armed), found, armed)
        assert verdict.passed is passed, verdict.message()
    assert "rank_monitor: mixed (rank 0, rank 1; hang)" in attribution.culprit_verdict(
        ExpectedCulprit(rank=1, cause="hang"), _judged(mixed), [
            {**c.fields(), "mono": m} for c, _, m in culprit.claims(mixed)], ("rank_monitor",)).message()


def test_a_named_source_that_stays_silent_fails_expect_culprit(event):
    events = _hang(event, HB1)
    found = [{**c.fields(), "mono": m} for c, _, m in culprit.claims(events)]
    wanted = ExpectedCulprit(rank=1, sources=["rank_monitor", "flight_recorder"])
    verdict = attribution.culprit_verdict(wanted, _judged(events), found, ("rank_monitor",))
    assert not verdict.passed and "flight_recorder: silent" in str(verdict.observed)


def test_restart_right_judges_the_first_decision_after_the_fault(event):
    """A full disk wants no restart; the launcher restarting the workers is the wrong call."""
    events = [event("fault_injected", 1.0, rank=1, fault="disk_full", fault_id="f0", target_rank=1),
              event("restart", 2.0, rank=-1, attempt=1, attempts_left=2)]
    verdict = attribution.restart_verdict(True, attribute(events, [], ()))
    assert not verdict.passed and "restart" in str(verdict.observed)


def test_the_claims_are_written_as_the_run_logs_events_and_replaced_at_each_judging(tmp_path, event):
    found = culprit.claims(_hang(event, HB0, HB1))
    culprit.record_claims(tmp_path, found)
    culprit.record_claims(tmp_path, found)
    written = [e for e in read_events(tmp_path) if e["event"] == "culprit_claim"]
    assert [(e["source"], e["culprit_rank"], e["mono"]) for e in written] == [("rank_monitor", 0, 5.0), ("rank_monitor", 1, 5.01)]


def test_the_schema_knows_every_source_and_cause_the_judge_knows():
    assert typing.get_args(CulpritSource) == culprit.SOURCES
    assert typing.get_args(CulpritCause) == attribution.EXPECTED_CAUSES
    with pytest.raises(ValueError, match="a culprit needs rank, node or cause"):
        Expect.model_validate({"culprit": {}})


def test_a_rerun_decision_on_a_rank_whose_own_check_passed_takes_the_flagged_ranks_check(event):
    """Every rank writes the decision; only the flagged rank knows which check failed (spiky_loss's rank 1
    writes check null): the claim is a spike either way, never a NaN by default."""
    events = [
        event("rerun", 1.0, rank=0, state="rerunning_in_place", diagnosis=None, iteration=105, flagged=[0], check="spiky"),
        event("rerun", 1.0, rank=1, state="rerunning_in_place", diagnosis=None, iteration=105, flagged=[0], check=None),
    ]
    assert {c.cause for c, _, _ in culprit.claims(events)} == {"spike"}


def test_megatron_lms_own_rerun_lines_name_the_rank_through_the_adapter():
    """A real Megatron-LM run (tests/data/megatron/rerun_transient: NaN injected on rank 0 of one GPU):
    the adapter's rerun events become the rerun source's claims, the diagnosis with its persistence."""
    from pathlib import Path

    from chaos.adapters.megatron import parse_text, to_events

    log = Path(__file__).resolve().parents[3] / "data" / "megatron" / "rerun_transient" / "output.log"
    found = [(c.source, c.culprit_rank, c.cause, c.persistence) for c, _, _ in culprit.claims(to_events(parse_text(log.read_text())))]
    assert found == [("rerun", 0, "nan", None), ("rerun", 0, "nan", "transient")]


def test_a_node_rejoining_is_no_fault_to_blame_and_does_not_cut_the_lost_nodes_window(event):
    events = [
        event("run_start", 0.5, rank=1, node="node1"),
        event("ft_timeouts", 0.6, heartbeat={}, sections={}, calculated=False),
        event("fault_injected", 2.0, rank=-1, fault="node_killed", fault_id="f0", target_rank=None, target_node="node1"),
        event("fault_injected", 3.0, rank=-1, fault="node_rejoin", fault_id="f1", target_rank=None, target_node="node1"),
        event("ft_timeout", 5.0, rank=-1, node="node1", line=HB1),
    ]
    (a,) = _judged(events)
    assert (a.fault, a.sources[0].outcome) == ("node_killed", RIGHT)


def test_a_restart_after_a_full_disk_was_cleared_is_right_and_one_before_is_wrong(event):
    """disk_full_during_save: the filler goes `duration_s` after the fault; the disk has no target to blame."""
    plan = [{"fault_id": "f0", "type": "disk_full", "duration_s": 2}]
    for restart_at, right in ((5.0, True), (2.0, False)):
        events = [event("fault_injected", 1.0, rank=-1, fault="disk_full", fault_id="f0", target_rank=None),
                  event("restart", restart_at, rank=-1, attempt=1, attempts_left=2)]
        (a,) = attribute(events, [], ("rank_monitor",), plan)
        assert a.sources == () and a.decision is not None and a.decision.right == "no restart until cleared"
        assert a.decision.agrees is right, a.decision.how


def test_a_launcher_that_stopped_and_whose_job_was_launched_again_restarted_it(event):
    """plugins_ft_job_retry: the in-job restarts used up, ft_launcher exits 1 and the FT plugin launches the
    job again (a new `launch`) on the same node: the kill was answered with a restart; without the new
    launch, a stop."""
    for relaunched in (True, False):
        events = [event("fault_injected", 1.0, rank=1, node="vm", fault="rank_killed", fault_id="f1", target_rank=1),
                  event("launcher_exit", 2.0, rank=-1, attempt=1, code=1),
                  *([event("launch", 2.1, rank=-1, attempt=2), event("run_start", 3.0, attempt=2, node="vm")] if relaunched else [])]
        (a,) = attribute(events, [], ())
        assert a.decision is not None and a.decision.agrees is relaunched, a.decision.how
        assert ("launched again on the same node" in a.decision.how) is relaunched


def test_a_persistent_nan_requeued_on_another_node_is_no_restart_in_place(event):
    """nan_persistent: exit 16, the launcher stops, the job is launched again under another node identity:
    the right call for a persistent fault; the same requeue onto the same node would be the wrong one."""
    for node, right in (("chaos-node-b", True), ("vm", False)):
        events = [event("fault_injected", 1.0, rank=1, node="vm", fault="nan_loss", fault_id="f0", target_rank=1,
                        persistence="persistent"),
                  event("exit", 1.5, code=16, reason="rerun"),
                  event("launcher_exit", 2.0, rank=-1, attempt=0, code=1),
                  event("launch", 2.1, rank=-1, attempt=1), event("run_start", 3.0, attempt=1, node=node)]
        (a,) = attribute(events, [], ())
        assert a.decision is not None and a.decision.agrees is right, a.decision.how


SECTION0_07 = ("2026-12-06 07:34:19,860 [WARNING] [vm] [workload:?(0) infra:?(?)] rank_monitor_server.py:522 [Cycle 0] "
               "Section 'step' has been open for 3.31 seconds. Timeout is 3.00 seconds.")
OUT1_07 = ("2026-12-06 07:34:26,924 [WARNING] [vm] [workload:?(1) infra:?(?)] rank_monitor_server.py:539 [Cycle 0] "
           "Was out of section for 10.37 seconds. Timeout is 10.00 seconds.")
"""NVRx 0.7.0's rank monitor, as rank_hung_sections printed it on the 1x H100 machine (2026-12-06): the
server knows its local rank only."""


def test_nvrx_0_7_s_rank_monitor_lines_name_their_local_rank_made_global(event):
    (section, out), = [[c for c, _, _ in culprit.claims(_hang(event, SECTION0_07, OUT1_07))]]
    assert (section.culprit_rank, section.detail) == (0, "section 'step' timed out: Section 'step' has been open for 3.31 "
                                                         "seconds. Timeout is 3.00 seconds.")
    assert (out.culprit_rank, out.culprit_node) == (1, "vm") and out.detail.startswith("Was out of section")
    (a,) = _judged(_hang(event, SECTION0_07, OUT1_07))
    assert (a.sources[0].outcome, a.sources[0].named) == (MIXED, ("rank 0", "rank 1"))


def test_a_0_7_local_rank_on_the_second_node_is_that_node_s_rank(event):
    events = [event("run_start", 0.5, node="node0"), event("run_start", 0.5, rank=1, node="node1"),
              event("ft_timeout", 5.0, rank=-1, node="node1", line=OUT1_07.replace("(1)", "(0)"))]
    ((claim, _, _),) = culprit.claims(events)
    assert (claim.culprit_rank, claim.culprit_node) == (1, "node1")
