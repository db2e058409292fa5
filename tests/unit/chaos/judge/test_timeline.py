"""Timeline metrics from hand-built event lists (exact mono stamps) and from a real run folder."""

from __future__ import annotations

import pytest

from chaos.judge.timeline import build_timeline, compute_metrics, final_losses, load_run
from runlog.log import EventLog


def ev(event: str, mono: float, rank: int = 0, attempt: int = 0, **fields) -> dict:
    return {"event": event, "mono": mono, "rank": rank, "attempt": attempt, "pid": 1, "node": "n", "wall": mono, **fields}


def loss(iteration: int, attempt: int = 0) -> float:
    return 10.0 - iteration * 0.5 + attempt * 0.01


def steps(first: int, last: int, attempt: int, t0: float, ranks=(0, 1)) -> list[dict]:
    return [
        ev("step", t0 + 0.1 * (i - first), rank=r, attempt=attempt, iteration=i, loss=loss(i, attempt), step_time=0.1)
        for i in range(first, last + 1)
        for r in ranks
    ]


def rank_killed_story() -> list[dict]:
    """Rank 1 killed before step 7; restart resumes from the step-5 checkpoint and finishes 12 steps."""
    return [
        ev("launch", 100.0, rank=-1, launcher="ft_launcher", world_size=2),
        ev("run_start", 100.5, versions={"torch": "2.13"}),
        ev("run_start", 100.5, rank=1),
        *steps(1, 6, 0, 101.0),
        ev("checkpoint_save_end", 101.45, iteration=5, path="ckpt/iter_5"),
        ev("checkpoint_save_end", 101.45, rank=1, iteration=5, path="ckpt/iter_5"),
        ev("fault_injected", 101.7, rank=1, fault="rank_killed", target_rank=1, iteration=7),
        ev("exit", 101.8, rank=1, reason="error", code=1),  # the victim's own exit is not a detection
        ev("worker_failed", 102.0, rank=-1, local_rank=1, exitcode=-9),
        ev("restart", 102.1, rank=-1, attempt=1, attempts_left=2),
        ev("run_start", 103.0, attempt=1),
        ev("run_start", 103.0, rank=1, attempt=1),
        ev("checkpoint_load", 103.2, attempt=1, iteration=5, path="ckpt/iter_5"),
        ev("checkpoint_load", 103.2, rank=1, attempt=1, iteration=5, path="ckpt/iter_5"),
        *steps(6, 12, 1, 103.5),
        ev("exit", 105.0, attempt=1, reason="completed", code=0),
        ev("exit", 105.0, rank=1, attempt=1, reason="completed", code=0),
        ev("launcher_exit", 105.5, rank=-1, attempt=1, code=0),
    ]


def test_the_longest_step_gap_counts_from_the_first_fault_and_within_one_attempt():
    """A slow first save (a 6 s gap from step 0 to step 1) before the fault is not the fault's gap, nor is the
    time from step 6 to the restart's step 6 (two attempts); a save that waits 4 s after the restart is."""
    story = rank_killed_story()
    story[3:3] = [ev("step", 95.0, iteration=0, loss=10.0, step_time=0.1)]
    assert compute_metrics(story).longest_step_gap_s == pytest.approx(0.1)
    assert compute_metrics([e for e in story if e["event"] != "fault_injected"]).longest_step_gap_s == pytest.approx(6.0)
    stalled = [{**e, "mono": e["mono"] + 4} if e["event"] == "step" and e["attempt"] == 1 and e["iteration"] >= 9 else e
               for e in story]
    assert compute_metrics(stalled).longest_step_gap_s == pytest.approx(4.1)


def test_steps_during_a_stall_are_those_between_the_storage_servers_stop_and_resume():
    story = [
        *steps(1, 6, 0, 101.0),
        ev("signal_sent", 101.25, rank=-1, signal="SIGSTOP", target=9, storage=True),
        ev("signal_sent", 101.3, rank=-1, signal="SIGSTOP", target=8),  # a sigstop fault's: not the storage
        ev("signal_sent", 101.45, rank=-1, signal="SIGCONT", target=9, storage=True),
    ]
    assert compute_metrics(story).steps_during_stall == 2  # steps 4 and 5, at 101.3 and 101.4
    assert compute_metrics(steps(1, 6, 0, 101.0)).steps_during_stall is None


def test_rank_killed_metrics():
    m = compute_metrics(rank_killed_story())
    assert (m.exit_code, m.restarts, m.completed_steps) == (0, 1, 12)
    assert (m.fault_mono, m.fault_attempt, m.fault_rank) == (101.7, 0, 1)
    assert (m.detect_mono, m.detected_by) == (102.0, "worker_failed")
    assert m.time_to_detect_s == pytest.approx(0.3)
    assert m.recover_mono == 103.5
    assert m.time_to_recover_s == pytest.approx(1.8)
    assert m.resumed_from_step == 5
    assert m.lost_steps == 1
    assert m.wall_s == pytest.approx(5.5)
    assert m.goodput == pytest.approx(12 * 0.1 / 5.5)
    assert m.checkpoints_saved == (5,)
    assert m.attempt_starts == (100.5, 103.0)


def test_the_signal_a_worker_died_of_after_the_fault_is_named() -> None:
    assert compute_metrics(rank_killed_story()).worker_signal == "SIGKILL"
    segv = [{**e, "exitcode": -11} if e["event"] == "worker_failed" else e for e in rank_killed_story()]
    assert compute_metrics(segv).worker_signal == "SIGSEGV"
    exited = [{**e, "exitcode": 1} if e["event"] == "worker_failed" else e for e in rank_killed_story()]
    assert compute_metrics(exited).worker_signal is None


def test_final_lineage_losses_take_the_latest_attempt():
    losses = compute_metrics(rank_killed_story()).losses
    assert list(losses) == list(range(1, 13))
    assert losses[5] == loss(5, 0)
    assert losses[6] == loss(6, 1), "step 6 was recomputed after the restart"
    assert final_losses(reversed(rank_killed_story())) == losses, "input order does not matter"


def test_no_fault_leaves_fault_metrics_unset():
    events = [ev("launch", 0.0, rank=-1), ev("run_start", 0.5), *steps(1, 4, 0, 1.0), ev("launcher_exit", 2.0, rank=-1, code=0)]
    m = compute_metrics(events)
    assert m.fault_mono is m.time_to_detect_s is m.time_to_recover_s is m.resumed_from_step is m.lost_steps is None
    assert (m.exit_code, m.restarts, m.completed_steps) == (0, 0, 4)


def test_empty_run():
    m = compute_metrics([])
    assert (m.exit_code, m.restarts, m.completed_steps, m.wall_s, m.goodput) == (None, None, 0, None, None)
    assert build_timeline([]).marks == ()


def test_goodput_is_not_observed_where_a_step_states_no_time():
    """A command's step lines (step_time null) and a Megatron line without its elapsed time (no step_time)."""
    launch, end = ev("launch", 0.0, rank=-1), ev("launcher_exit", 4.0, rank=-1, code=0)
    observed = [ev("step", 1.0 + i, iteration=i, loss=1.0, step_time=None, observed=True) for i in (1, 2)]
    untimed = [ev("step", 1.0 + i, iteration=i, loss=1.0, observed=True) for i in (1, 2)]
    assert compute_metrics([launch, *observed, end]).goodput is None
    assert compute_metrics([launch, *untimed, end]).goodput is None
    timed = [ev("step", 1.0 + i, iteration=i, loss=1.0, step_time=0.5, observed=True) for i in (1, 2)]
    assert compute_metrics([launch, *timed, end]).goodput == pytest.approx(1.0 / 4.0)


def test_goodput_without_runner_events_spans_first_to_last_event():
    events = [ev("run_start", 10.0), *steps(1, 4, 0, 11.0, ranks=(0,)), ev("exit", 12.0, reason="completed")]
    m = compute_metrics(events)
    assert m.wall_s == pytest.approx(2.0)
    assert m.goodput == pytest.approx(0.4 / 2.0)
    assert m.exit_code is None


def test_detection_before_the_fault_is_ignored():
    events = [ev("signal_received", 0.5, signal="SIGUSR1"), ev("fault_injected", 1.0, rank=1, target_rank=1, iteration=3),
              ev("signal_received", 1.4, signal="SIGTERM")]
    m = compute_metrics(events)
    assert (m.detected_by, m.time_to_detect_s) == ("signal_received", pytest.approx(0.4))


@pytest.mark.parametrize(
    ("late", "detected"),
    [
        (ev("straggler_report", 2.0, flagged=[1]), "straggler_report"),
        (ev("rerun", 2.0, state="rerunning"), "rerun"),
        (ev("ft_timeout", 2.0, rank=-1, line="timeout"), "ft_timeout"),
        (ev("exit", 2.0, reason="error", code=1), "exit"),
    ],
)
def test_each_detection_kind(late, detected):
    noise = [ev("straggler_report", 1.5, flagged=[]), ev("exit", 1.6, rank=1, reason="error"), ev("signal_sent", 1.7, rank=-1)]
    m = compute_metrics([ev("fault_injected", 1.0, rank=1, target_rank=1, iteration=3), *noise, late])
    assert (m.detected_by, m.detect_mono) == (detected, 2.0)


def test_resumed_from_zero_when_the_next_attempt_steps_without_loading():
    events = [*steps(1, 3, 0, 1.0), ev("fault_injected", 2.0, iteration=4), ev("run_start", 3.0, attempt=1),
              *steps(1, 5, 1, 4.0)]
    m = compute_metrics(events)
    assert (m.resumed_from_step, m.lost_steps, m.time_to_recover_s) == (0, 3, 2.0)


def test_no_later_attempt_means_no_recovery():
    events = [*steps(1, 3, 0, 1.0), ev("fault_injected", 2.0, iteration=4), ev("launcher_exit", 3.0, rank=-1, code=1)]
    m = compute_metrics(events)
    assert m.resumed_from_step is m.lost_steps is m.time_to_recover_s is m.detect_mono is None
    assert m.exit_code == 1


def test_corrupt_checkpoints_are_listed_once():
    events = [ev("checkpoint_corrupt", 1.0, path="c/iter_10", reason="sha256"),
              ev("checkpoint_corrupt", 1.0, rank=1, path="c/iter_10", reason="sha256"),
              ev("checkpoint_corrupt", 1.1, path="c/iter_5", reason="size")]
    assert compute_metrics(events).checkpoints_corrupt == ("c/iter_10", "c/iter_5")


def test_timeline_keeps_notable_events_in_order():
    timeline = build_timeline(rank_killed_story())
    names = [(m.event, m.rank, m.attempt) for m in timeline.marks]
    assert names == [
        ("launch", -1, 0), ("run_start", 0, 0), ("checkpoint_save_end", 0, 0), ("fault_injected", 1, 0),
        ("exit", 1, 0), ("worker_failed", -1, 0), ("restart", -1, 1), ("run_start", 0, 1),
        ("checkpoint_load", 0, 1), ("exit", 0, 1), ("launcher_exit", -1, 1),
    ]
    fault = timeline.marks[3]
    assert fault.t == pytest.approx(1.7)
    assert fault.info == {"fault": "rank_killed", "target_rank": 1, "iteration": 7}
    assert [(s.iteration, s.attempt) for s in timeline.steps][5:8] == [(6, 0), (6, 1), (7, 1)]
    assert timeline.versions == {"torch": "2.13"}


def test_load_run_reads_a_real_run_folder(tmp_path):
    runner = EventLog(tmp_path, "launcher", rank=-1, attempt=0)
    runner.emit("launch", command="x", launcher="torchrun", world_size=1, ports=[1])
    rank0 = EventLog(tmp_path, "rank-0", rank=0, attempt=0)
    rank0.emit("run_start", versions={"torch": "x"})
    for i in (1, 2, 3):
        rank0.emit("step", iteration=i, loss=float(i), lr=0.1, step_time=0.01, consumed_samples=i)
    rank0.emit("fault_injected", fault="rank_killed", target_rank=0, iteration=4, fault_id="f0", detail="")
    runner.emit("worker_failed", local_rank=0, exitcode=-9, line="died")
    again = EventLog(tmp_path, "rank-0", rank=0, attempt=1)
    again.emit("checkpoint_load", iteration=2, path="p", seconds=0.0)
    again.emit("step", iteration=3, loss=30.0, lr=0.1, step_time=0.01, consumed_samples=3)
    runner.emit("launcher_exit", code=0)
    for log in (runner, rank0, again):
        log.close()
    timeline, m = load_run(tmp_path)
    assert m.losses == {1: 1.0, 2: 2.0, 3: 30.0}
    assert (m.detected_by, m.resumed_from_step, m.lost_steps, m.restarts, m.exit_code) == ("worker_failed", 2, 1, 1, 0)
    assert timeline.marks[0].event == "launch" and timeline.marks[0].t == 0.0


def test_preemption_metrics_inside_and_outside_the_grace(event) -> None:
    term = event("fault_injected", 10.0, rank=-1, fault="sigterm", grace_s=1.0, target_rank=None)
    saved = [term, event("checkpoint_save_end", 10.5, iteration=12)]
    m = compute_metrics(saved)
    assert (m.preemption_saved, m.grace_killed, m.faults_injected) == (True, False, 1)
    late = [term, event("signal_sent", 11.0, rank=-1, signal="SIGKILL", target=1, pid=1), event("checkpoint_save_end", 11.5, iteration=12)]
    m = compute_metrics(late)
    assert (m.preemption_saved, m.grace_killed) == (False, True)
    assert compute_metrics([event("step", 1.0, iteration=1, loss=1.0)]).preemption_saved is None
    relaunched = [term, event("checkpoint_save_end", 10.8, attempt=1, iteration=10)]
    assert compute_metrics(relaunched).preemption_saved is False, "the relaunch's save is not the preempted run's"


def test_a_slurm_job_counts_its_launches_and_reports_slurms_record(event) -> None:
    """Each job launch (a requeue too) writes a runner `launch`; the submitting host's `slurm_job` is Slurm's
    record of the job; Slurm's own SIGKILL at the time limit shows as TIMEOUT, not as a signal we sent."""
    term = event("fault_injected", 10.0, rank=-1, fault="sigterm", grace_s=60.0, target_rank=None)
    events = [
        event("launch", 1.0, rank=-1, job_id="7"), term, event("launch", 30.0, rank=-1, attempt=1, job_id="7"),
        event("slurm_job", 90.0, rank=-1, job_id="7", state="TIMEOUT", exit_code="0:15"),
    ]
    m = compute_metrics(events)
    assert (m.launches, m.slurm_job_state, m.slurm_exit_code, m.grace_killed) == (2, "TIMEOUT", "0:15", True)
    local = compute_metrics([event("launch", 1.0, rank=-1), term])
    assert (local.launches, local.slurm_job_state, local.grace_killed) == (1, None, False)


def test_resumed_from_is_the_step_before_the_first_step_without_a_load(event) -> None:
    events = [
        event("step", 1.0, iteration=12, loss=1.0),
        event("fault_injected", 2.0, rank=-1, fault="sigkill", target_rank=1),
        event("step", 5.0, attempt=1, iteration=11, loss=1.0),
    ]
    m = compute_metrics(events)
    assert (m.resumed_from_step, m.lost_steps) == (10, 2)


def test_learned_timeouts_are_those_the_last_attempt_started_with(event):
    events = [
        event("ft_timeouts", 1.0, attempt=0, calculated=False),
        event("ft_timeouts", 2.0, attempt=0, calculated=True),
        event("ft_timeouts", 3.0, attempt=1, calculated=True),
        event("ft_timeouts", 4.0, attempt=1, calculated=False),
    ]
    assert compute_metrics(events).learned_timeouts_used is True
    assert compute_metrics(events[:2]).learned_timeouts_used is False, "attempt 0's first report: configured"
    assert compute_metrics([event("step", 1.0, iteration=1, loss=1.0)]).learned_timeouts_used is None


def test_restarts_are_the_launchers_when_the_ranks_wrote_no_event_of_their_own():
    """A command whose attempts died at start-up (a port its last attempt's leftovers held) printed no step:
    its launcher's restart lines still count (they carry the attempt they start)."""
    events = [ev("launch", 0.0, rank=-1), ev("restart", 1.0, rank=-1, attempt=1), ev("restart", 2.0, rank=-1, attempt=2),
              ev("launcher_exit", 3.0, rank=-1, attempt=2, code=1)]
    assert compute_metrics(events).restarts == 2
    assert compute_metrics([*events, ev("step", 2.5, attempt=3, iteration=1, loss=1.0)]).restarts == 3
