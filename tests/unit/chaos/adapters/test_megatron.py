"""The Megatron log adapter on the runs recorded on the lent GPU, real published excerpts, and the two
source-derived straggler excerpts no recording covers (tests/data/megatron/README.md says which is which).

Each record is checked against what its lines say, and each translated log against the timeline metrics
the judge computes from it, so the adapter is tested as the judge will use it.
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path

import pytest

from chaos.adapters import lineage
from chaos.adapters.launcher import NEXT_ROUND
from chaos.adapters.megatron import (
    MegatronLog,
    Record,
    final_losses,
    parse_lines,
    parse_text,
    to_events,
)
from chaos.adapters.megatron_checkpoints import CheckpointFolderError, read_checkpoint_folder
from chaos.judge.timeline import compute_metrics

DATA = Path(__file__).resolve().parents[3] / "data" / "megatron"


def records(name: str) -> list[Record]:
    return parse_text((DATA / name).read_text())


def of(recs: list[Record], event: str) -> list[Record]:
    return [r for r in recs if r.event == event]


def metrics(name: str):
    return compute_metrics(to_events(records(name)))


def test_real_megatron_lm_iteration_lines_give_every_field():
    """Real: Megatron-LM issue #1570 (mcore 0.12), timestamped, with the MoE auxiliary loss."""
    steps = of(records("real/mlm_core_0.12_issue1570.log"), "step")
    assert [s.fields["iteration"] for s in steps] == [1, 2, 3]
    first = steps[0].fields
    assert first["loss"] == 11.86396 and first["losses"] == {"lm loss": 11.86396, "load_balancing_loss": 1.000977}
    assert (first["train_iters"], first["consumed_samples"], first["global_batch_size"]) == (10, 32, 32)
    assert first["lr"] == 3.333333e-05 and first["grad_norm"] == 6.321 and first["loss_scale"] == 1.0
    assert first["step_time"] == pytest.approx(21.8479)
    assert (first["skipped_iterations"], first["nan_iterations"]) == (0, 0)
    assert steps[0].wall == datetime(2025, 5, 9, 6, 11, 17).timestamp()
    assert steps[2].fields["loss"] == 8.431922


def test_a_step_that_went_nan_has_no_lm_loss_and_reads_as_nan():
    """Real: Megatron-DeepSpeed #396 (grad norm nan, no loss printed) and Megatron-LLM #33 (the 3385 line)."""
    deepspeed = of(records("real/megatron_deepspeed_nan_issue396.log"), "step")
    assert [s.fields["iteration"] for s in deepspeed] == [5426, 5427, 5428]
    assert all(math.isnan(s.fields["loss"]) and math.isnan(s.fields["grad_norm"]) for s in deepspeed)
    llm = final_losses(records("real/megatron_llm_nan_issue33.log"))
    assert llm[3383] == 0.7334521 and llm[3384] == 0.7072597 and math.isnan(llm[3385])


def test_bridge_iteration_lines_and_its_step_time_line():
    """Recorded: Bridge 0.6.2's training_log (time to the second), with its 'Step Time' print between."""
    recs = records("bridge_corr/output.log")
    assert [r.event for r in recs if r.event != "step"] == [
        "run_start", "checkpoint_save_begin", "checkpoint_save_end", "checkpoint_save_begin", "checkpoint_save_end", "exit",
    ]
    assert final_losses(recs) == {
        1: 10.41997, 2: 10.41821, 3: 10.27485, 4: 10.164, 5: 10.05249, 6: 10.0102, 7: 9.88262, 8: 9.795152,
        9: 9.789313, 10: 9.756361,
    }
    assert of(recs, "step")[0].wall == datetime(2026, 12, 1, 10, 11, 52).timestamp()


def test_megatron_lm_prints_the_mean_of_its_first_two_losses_at_iteration_2():
    """Recorded: Megatron-LM's log of the same run as Bridge's: 10.41909 = (10.41997 + 10.41821) / 2."""
    mlm = final_losses(records("mlm_corr/output.log"))
    assert mlm[1] == 10.41997 and mlm[2] == 10.41909 and mlm[3] == 10.27485
    assert of(records("mlm_corr/output.log"), "step")[0].wall == datetime(2026, 12, 1, 10, 11, 52, 176582).timestamp()


def test_validation_lines_are_not_steps():
    """Recorded (mlm_corr): ' validation loss at iteration 5 on validation set | lm loss value: ...'."""
    lines = [x for x in (DATA / "mlm_corr/output.log").read_text().splitlines() if "validation loss at iteration" in x]
    assert lines and parse_lines(lines) == []


def test_real_ft_launcher_lines_count_the_attempt():
    """Real: ft_launcher 0.4.1's exit-code and restart lines; the steps after the restart are attempt 1."""
    launcher = (DATA / "real/ft_launcher_0.4.1_rank_killed_cpu.log").read_text().splitlines()
    step = " [2026-12-01 09:45:40.000000] iteration        6/      12 | lm loss: 5.302269E+00 |"
    recs = parse_lines([*launcher, step])
    assert [(r.event, r.rank, r.attempt) for r in recs] == [("worker_failed", -1, 0), ("restart", -1, 0), ("step", 0, 1)]
    assert recs[0].fields == {"exitcode": -9, "local_rank": 1} and recs[1].fields == {"attempts_left": 3}
    assert recs[0].wall == datetime(2026, 12, 1, 9, 45, 35, 477000).timestamp()


def test_a_step_printed_after_the_restart_line_and_before_the_next_rendezvous_is_the_last_attempts():
    """The restart line comes before the agent stops the surviving ranks; rank 0's iteration 6, printed while
    it was being stopped, is attempt 0's. The rendezvous line of the real 0.4.1 log moves the attempt."""
    launcher = (DATA / "real/ft_launcher_0.4.1_rank_killed_cpu.log").read_text().splitlines()
    join = next(i for i, x in enumerate(launcher) if "attempts to join the next round" in x)
    late = " [2026-12-01 09:45:35.500000] iteration        6/      12 | lm loss: 5.302269E+00 |"
    again = " [2026-12-01 09:45:40.000000] iteration        6/      12 | lm loss: 5.302269E+00 |"
    recs = parse_lines([*launcher[:join], late, *launcher[join:], again])
    assert [(r.attempt, r.fields["iteration"]) for r in recs if r.event == "step"] == [(0, 6), (1, 6)]


@pytest.mark.parametrize("log", [
    "real/ft_launcher_0.4.1_rank_killed_cpu.log", "mlm_ft_kill/output.log", "real/torchrun_2.13_rank_killed_cpu.log",
])
def test_every_launcher_we_run_prints_the_next_round_line_after_its_stop(log: str):
    """Recorded: ft_launcher 0.4.1 here, 0.7.0 on the GPU, torchrun 2.13 here: each prints a line ``NEXT_ROUND``
    reads after its stop line, and none before its restart line."""
    lines = (DATA / log).read_text().splitlines()
    restart = next(i for i, x in enumerate(lines) if "will restart worker group" in x)
    stop = next(i for i, x in enumerate(lines) if "Stopping worker" in x)
    assert restart < stop and any(NEXT_ROUND.search(x) for x in lines[stop:])
    assert not any(NEXT_ROUND.search(x) for x in lines[restart:stop])


def test_ft_launcher_07_lines_state_their_time():
    """Recorded (mlm_ft_kill): ft_launcher 0.7 logs '2026-12-01 10:12:27,827 [INFO] ...' with no brackets."""
    restart = next(r for r in records("mlm_ft_kill/output.log") if r.event == "restart")
    assert restart.wall == datetime(2026, 12, 1, 10, 12, 27, 827000).timestamp()


def test_real_simulated_fault_line():
    """Real: the line Bridge printed on the lent GPU (megatron.md)."""
    (fault,) = records("real/bridge_simulate_fault_probe.log")
    assert (fault.event, fault.fields["fault"], fault.fields["target_rank"]) == ("fault_injected", "rank_killed", 0)


def test_bridge_simulated_fault_printed_twice_counts_once_per_attempt():
    """Recorded: Bridge's simulate_fault re-arms in every attempt and prints its block to stdout and stderr."""
    recs = records("bridge_simfault_nodistopt/output.log")
    faults = of(recs, "fault_injected")
    assert [(f.attempt, f.fields["fault"], f.fields["iteration"]) for f in faults] == [(a, "rank_killed", 17) for a in range(4)]
    assert [r.attempt for r in of(recs, "ft_timeouts")] == [0, 1, 2, 3]


def test_async_save_overlaps_steps():
    """Recorded: Bridge's async torch_dist save of iteration 20 is finalized after iterations 21 and 22."""
    recs = records("bridge_async_kill_after/1_sigkill/output.log")
    saves = [(r.event, r.fields["iteration"], r.fields["async"]) for r in recs if r.event.startswith("checkpoint_save")]
    assert saves == [
        ("checkpoint_save_begin", 10, True), ("checkpoint_save_end", 10, True),
        ("checkpoint_save_begin", 20, True), ("checkpoint_save_end", 20, True),
    ]
    between = [r.fields["iteration"] for r in recs if r.event == "step" and saves and 114 < r.line < 122]
    assert between == [21, 22]
    assert metrics("bridge_async_kill_after/1_sigkill/output.log").steps_during_async_save >= 2


def test_an_async_save_cut_short_is_a_begin_without_an_end():
    """Recorded: the rank was SIGKILLed right after the async save of 20 was scheduled."""
    recs = records("bridge_async_kill_during/1_sigkill/output.log")
    assert [(r.event, r.fields["iteration"]) for r in recs if r.event.startswith("checkpoint_save")][-1] == (
        "checkpoint_save_begin", 20)


def test_kill_by_megatron_cores_injector_and_resume_under_ft_launcher():
    """Recorded: Megatron-Core's fault injector announces a SIGKILL for a time; NVRx's inject_fault says
    when it sends it; ft_launcher restarts; the new attempt loads the iteration-30 checkpoint."""
    recs = records("mlm_ft_kill/output.log")
    (fault,) = of(recs, "fault_injected")
    assert fault.fields == {"fault": "SIGKILL", "target_rank": 0, "iteration": 40}
    assert "inject_fault:sending signal" in (DATA / "mlm_ft_kill/output.log").read_text().splitlines()[fault.line - 1]
    assert [(r.event, r.fields["iteration"], r.attempt) for r in recs if r.event in ("resume", "checkpoint_load")] == [
        ("resume", 30, 1), ("checkpoint_load", 30, 1),
    ]
    m = metrics("mlm_ft_kill/output.log")
    assert (m.restarts, m.resumed_from_step, m.lost_steps, m.completed_steps) == (1, 30, 10, 100)
    assert m.detected_by == "worker_failed" and m.checkpoints_saved == tuple(range(10, 101, 10))
    assert (m.exit_reason, m.saved_at_exit, m.learned_timeouts_used) == ("completed", True, True)
    saves = [r for r in recs if r.event.startswith("checkpoint_save") and r.fields["iteration"] == 40]
    assert [(r.event, r.attempt) for r in saves] == [("checkpoint_save_begin", 0), ("checkpoint_save_begin", 1),
                                                     ("checkpoint_save_end", 1)], "attempt 0 died inside its save of 40"


def test_the_ft_timeouts_each_attempt_starts_with():
    """Recorded: MLM's --calc-ft-timeouts: attempt 0 starts with the configured section timeouts, attempt 1
    with those learned by attempt 0 (loaded from ft_state.json)."""
    timeouts = of(records("mlm_ft_hang/output.log"), "ft_timeouts")
    assert [(t.attempt, t.fields["calculated"], t.fields["sections"]["step"]) for t in timeouts] == [(0, False, 30.0), (1, True, 1.61)]
    assert timeouts[1].fields["sections"] == {"setup": 300.0, "step": 1.61, "checkpointing": 140.78, "out_of_section": 30.0}
    hb = "FT: initialized. Timeouts=HeartbeatTimeouts(initial=60.00, subsequent=None, were_calculated=True)"  # NVRx's __str__
    (record,) = parse_lines([hb])
    assert record.fields == {"heartbeat": {"initial": 60.0, "subsequent": None}, "sections": {}, "calculated": True}


def test_a_hang_is_detected_by_the_learned_section_timeout():
    """Recorded: SIGSTOP by the injector; the rank monitor's 'Section 'step' has been open for 2.48 s'."""
    m = metrics("mlm_ft_hang/output.log")
    assert (m.detected_by, m.restarts, m.resumed_from_step, m.lost_steps) == ("ft_timeout", 1, 30, 9)
    assert m.time_to_detect_s == pytest.approx(2.48, abs=0.01)


def test_an_announced_fault_that_never_came_is_no_fault():
    """Recorded lines up to the injector's announcement (for 10:12:27.72), then the recorded restart line
    restamped 2.6 s earlier (the rank died of something else first): no fault fired."""
    lines = (DATA / "mlm_ft_kill/output.log").read_text().splitlines()
    restart = next(x for x in lines if "will restart worker group" in x).replace("10:12:27,827", "10:12:25,100")
    recs = parse_lines([*lines[:175], restart])
    assert not of(recs, "fault_injected") and "FAULT INJECTION" in lines[173]


def test_rerun_state_machine_persistent_error_exits_16_then_17_on_another_node():
    """Recorded: validate_results with the error injector's persistent error: 16 with a checkpoint; on the
    same node 16 again; on another node (hostname rerun-node-b) the persistent-error diagnosis and 17."""
    first = records("rerun_persistent/1_first/output.log")
    assert [(r.fields.get("diagnosis"), r.fields["flagged"]) for r in of(first, "rerun")] == [(None, [0]), ("reproducible", [0])]
    (stop,) = of(first, "exit")
    assert (stop.fields["reason"], stop.fields["code"]) == ("rerun", 16)
    m = metrics("rerun_persistent/1_first/output.log")
    assert m.trainer_exit_codes == [16] and m.saved_at_exit, "the exit-16 checkpoint is written after the announcement"
    same = records("rerun_persistent/2_same_node/output.log")
    assert [r.fields["state"] for r in of(same, "rerun")] == ["will_rerun_from_checkpoint"]
    assert [r.fields["code"] for r in of(same, "exit")] == [16]
    other = records("rerun_persistent/3_other_node/output.log")
    assert [r.fields["diagnosis"] for r in of(other, "rerun")] == ["persistent_error"]
    assert [r.fields["code"] for r in of(other, "exit")] == [17]


def test_rerun_transient_error_exits_17():
    """Recorded: the rerun in place does not reproduce the injected error."""
    m = metrics("rerun_transient/output.log")
    assert (m.rerun_diagnosis, m.trainer_exit_codes, m.exit_reason) == ("transient_error", [17], "rerun")


def test_bridge_straggler_reports_flag_ranks():
    """Source-derived (no recording: NVRx straggler detection needs 2 GPUs): NVRxStragglerDetectionManager's
    warnings and score blocks, one report per interval."""
    reports = of(records("derived/bridge_straggler_reports.log"), "straggler_report")
    assert [r.fields["flagged"] for r in reports] == [[1], []]
    assert reports[0].fields["scores"] == {"relative": {1: 0.52, 0: 1.0}, "individual": {1: 0.5, 0: 0.98}}
    assert reports[0].fields["iteration"] == 10 and reports[1].fields["iteration"] == 11
    m = metrics("derived/bridge_straggler_reports.log")
    assert m.stragglers_flagged == [1] and m.exit_reason == "straggler_detected"


def test_nvrx_example_report_gives_scores():
    """Source-derived: NVRx examples/straggler/example.py prints scores, no threshold, so it flags nobody."""
    (report,) = records("derived/nvrx_straggler_example.log")
    assert report.fields["scores"] == {"relative": {0: 1.0, 1: 0.5123}, "individual": {0: 0.99, 1: 0.51}}
    assert report.fields["flagged"] == []


def test_sigterm_is_seen_when_it_comes_and_the_exit_follows_its_checkpoint():
    """Recorded: Bridge's 'Received signal 15, initiating graceful stop', the save of 16, then
    print_datetime('exiting program after receiving SIGTERM.')."""
    recs = records("bridge_preempt/1_sigterm/output.log")
    (signalled,) = of(recs, "signal_received")
    assert (signalled.fields, signalled.line) == ({"signal": "SIGTERM", "iteration": 15}, 97)
    m = metrics("bridge_preempt/1_sigterm/output.log")
    assert (m.exit_reason, m.saved_at_exit, m.checkpoints_saved) == ("signal", True, (16,))
    resumed = records("bridge_preempt/2_resume/output.log")
    assert [r.fields["iteration"] for r in of(resumed, "checkpoint_load")] == [16]


LOGS = sorted(p.relative_to(DATA).as_posix() for p in DATA.rglob("*.log") if p.name != "record.log")


@pytest.mark.parametrize("name", LOGS)
def test_live_feeding_gives_what_the_whole_log_gives(name):
    """The runner feeds lines as they arrive; the judge reads the file afterwards: same records."""
    lines = (DATA / name).read_text().splitlines()
    log = MegatronLog()
    live = [r for line in lines for r in log.feed(line)] + log.close()
    assert live and repr(live) == repr(parse_lines(lines)), "repr: NaN losses never compare equal"


def test_final_lineage_drops_steps_a_restart_recomputed_or_never_reached_again():
    steps = [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (3, 3.5), (5, 5.5), (2, 2.25)]
    assert lineage(steps) == {1: 1.0, 2: 2.25}
    assert lineage([(1, 1.0), (2, 2.0), (3, 3.0), (2, 2.5), (3, 3.5)]) == {1: 1.0, 2: 2.5, 3: 3.5}


def test_events_carry_runlog_fields_in_time_order():
    events = to_events(records("bridge_async_kill_after/1_sigkill/output.log"))
    assert [e["mono"] for e in events] == sorted(e["mono"] for e in events)
    begin = next(e for e in events if e["event"] == "checkpoint_save_begin")
    assert begin["timed"] is False and begin["observed"] is True and begin["rank"] == 0
    assert {"event", "rank", "attempt", "wall", "mono", "line"} <= begin.keys()


def megatron_save_folder(root: Path, tracker: str | None, saves: dict[str, str]) -> Path:
    """A save folder laid out as Megatron names it (get_checkpoint_name, get_checkpoint_tracker_filename)."""
    root.mkdir()
    if tracker is not None:
        (root / "latest_checkpointed_iteration.txt").write_text(tracker)
    for name, marker in saves.items():
        target = root / name / marker
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"x")
    return root


def test_checkpoint_folder_tells_the_resume_point_and_finished_saves(tmp_path):
    """Layout from the sources: torch_dist writes metadata.json in its finalize step, the legacy format
    mp_rank_*/model_optim_rng.pt; iteration 15 is an async save still in flight (no metadata yet)."""
    folder = megatron_save_folder(tmp_path / "ckpt", "10", {
        "iter_0000005": "metadata.json", "iter_0000010": "metadata.json", "iter_0000015": "__0_0.distcp",
        "iter_0000020": "mp_rank_00/model_optim_rng.pt",
    })
    ckpt = read_checkpoint_folder(folder)
    assert (ckpt.latest, ckpt.release) == (10, False)
    assert (ckpt.iterations, ckpt.complete) == ((5, 10, 15, 20), (5, 10, 20))


def test_checkpoint_folder_errors_name_the_problem(tmp_path):
    assert read_checkpoint_folder(megatron_save_folder(tmp_path / "rel", "release", {})).release
    with pytest.raises(CheckpointFolderError, match="neither an iteration nor 'release'"):
        read_checkpoint_folder(megatron_save_folder(tmp_path / "bad", "ten", {}))
    with pytest.raises(CheckpointFolderError, match="not a Megatron checkpoint folder"):
        read_checkpoint_folder(megatron_save_folder(tmp_path / "empty", None, {}))
    with pytest.raises(CheckpointFolderError, match="no such checkpoint folder"):
        read_checkpoint_folder(tmp_path / "missing")
