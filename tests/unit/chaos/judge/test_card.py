"""What the resiliency card's scenarios are judged by: the pitfalls harness verdict (unexpected pitfalls fail
every run), the deadline a hang must reach, where a restart resumed from, and which timeout won."""

from __future__ import annotations

from chaos.adapters.launcher import classify
from chaos.judge.timeline import compute_metrics
from chaos.judge.verdicts import harness_verdicts
from chaos.schema.expect import Expect
from runlog.records import NcclWatchdog


def by_name(verdicts):
    return {v.name: v for v in verdicts}


def test_a_pitfall_fails_a_run_that_does_not_expect_it_and_names_the_cards_warning(event):
    events = [{**event("pitfall", 1.0, rank=r), "name": "ft_without_ft_launcher", "detail": ""} for r in (0, 1)]
    unexpected = by_name(harness_verdicts(events, 60))["pitfalls"]
    assert not unexpected.passed and "FT client active but no rank monitor" in unexpected.message()
    expected = by_name(harness_verdicts(events, 60, Expect(pitfalls=["ft_without_ft_launcher"])))["pitfalls"]
    assert expected.passed
    missing = by_name(harness_verdicts([], 60, Expect(pitfalls=["ft_without_ft_launcher"])))["pitfalls"]
    assert not missing.passed and missing.observed == "none"


def test_killed_at_deadline_turns_the_deadline_verdict_around(event):
    killed = [event("deadline", 20.0, rank=-1, seconds=20)]
    assert not by_name(harness_verdicts(killed, 20))["deadline"].passed
    assert by_name(harness_verdicts(killed, 20, Expect(killed_at_deadline=True)))["deadline"].passed
    assert not by_name(harness_verdicts([], 20, Expect(killed_at_deadline=True)))["deadline"].passed


def test_resume_source_is_what_the_first_restart_loaded(event):
    fault = event("fault_injected", 1.0, rank=1, fault="rank_killed", target_rank=1)
    local = [fault, event("checkpoint_load", 3.0, attempt=1, iteration=8, local=True), event("step", 3.1, attempt=1, iteration=9, loss=5.0)]
    persistent = [fault, event("checkpoint_load", 3.0, attempt=1, iteration=5), event("step", 3.1, attempt=1, iteration=6, loss=5.0)]
    scratch = [fault, event("step", 3.1, attempt=1, iteration=1, loss=5.0)]
    assert [compute_metrics(e).resume_source for e in (local, persistent, scratch)] == ["local", "persistent", "none"]
    assert compute_metrics(local).resumed_from_step == 8


def test_timeout_won_is_the_first_timeout_to_act_after_the_fault(event):
    fault = event("fault_injected", 1.0, rank=1, fault="collective_hang", target_rank=1)
    watchdog = event("nccl_watchdog", 61.0, rank=-1, line="Watchdog caught collective operation timeout")
    abort = event("inprocess_abort", 62.0, rank=1, inprocess_iteration=0, active_rank=1)
    assert compute_metrics([fault, abort, watchdog]).timeout_won == "nccl_watchdog"
    assert compute_metrics([fault, event("inprocess_abort", 5.0, rank=1), watchdog]).timeout_won == "inprocess"
    assert compute_metrics([fault]).timeout_won is None


def test_the_nccl_watchdog_line_is_a_runner_event():
    line = ("[rank0]:[E1201 12:00:00.0 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=60000) ran for 60001 milliseconds")
    assert isinstance(classify(line), NcclWatchdog)
