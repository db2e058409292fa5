"""The Megatron log adapter on real and source-derived excerpts (tests/data/megatron/README.md says which).

Each record is checked against what its lines say, and each translated log against the timeline metrics
the judge computes from it, so the adapter is tested as the judge will use it.
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path

import pytest

from chaos.adapters import lineage
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
    """Source-derived: Bridge v0.6.0's training_log (time without microseconds) and its 'Step Time' print."""
    recs = records("derived/bridge_seed2_correlation.log")
    assert [r.event for r in recs] == ["run_start"] + ["step"] * 5
    assert final_losses(recs) == {1: 10.41997, 2: 10.41821, 3: 10.34062, 4: 10.21516, 5: 10.10112}
    assert recs[1].wall == datetime(2026, 12, 1, 10, 0, 31).timestamp()


def test_validation_lines_are_not_steps():
    """Source-derived from evaluate_and_print_results: ' validation loss at iteration N | lm loss value: ...'."""
    text = " validation loss at iteration 10 on validation set | lm loss value: 1.250000E+00 | lm loss PPL: 3.49 | \n"
    assert parse_text(text) == []


def test_real_ft_launcher_lines_count_the_attempt():
    """Real: ft_launcher 0.4.1's exit-code and restart lines; the steps after the restart are attempt 1."""
    launcher = (DATA / "real/ft_launcher_0.4.1_rank_killed_cpu.log").read_text().splitlines()
    step = " [2026-12-01 09:45:40.000000] iteration        6/      12 | lm loss: 5.302269E+00 |"
    recs = parse_lines([*launcher, step])
    assert [(r.event, r.rank, r.attempt) for r in recs] == [("worker_failed", -1, 0), ("restart", -1, 0), ("step", 0, 1)]
    assert recs[0].fields == {"exitcode": -9, "local_rank": 1} and recs[1].fields == {"attempts_left": 3}
    assert recs[0].wall == datetime(2026, 12, 1, 9, 45, 35, 477000).timestamp()


def test_real_simulated_fault_line():
    """Real: the line Bridge printed on the lent GPU (megatron.md)."""
    (fault,) = records("real/bridge_simulate_fault_probe.log")
    assert (fault.event, fault.fields["fault"], fault.fields["target_rank"]) == ("fault_injected", "rank_killed", 0)


def test_async_save_overlaps_steps_and_the_twice_printed_fault_counts_once():
    """Source-derived: Bridge's async save of iteration 5 finalized after iterations 6 and 7, then its
    simulate_fault block, printed to stdout and to stderr."""
    recs = records("derived/bridge_async_save_then_simulated_fault.log")
    saves = [(r.event, r.fields["iteration"], r.fields["async"]) for r in recs if r.event.startswith("checkpoint_save")]
    assert saves == [("checkpoint_save_begin", 5, True), ("checkpoint_save_end", 5, True)]
    (fault,) = of(recs, "fault_injected")
    assert fault.fields["iteration"] == 7
    m = metrics("derived/bridge_async_save_then_simulated_fault.log")
    assert (m.steps_during_async_save, m.faults_injected, m.checkpoints_saved) == (2, 1, (5,))


def test_kill_and_resume_under_ft_launcher():
    """Source-derived: Megatron-Core's fault injector announces a SIGKILL; the launcher restarts; the new
    attempt loads the iteration-5 checkpoint and finishes."""
    recs = records("derived/mlm_injector_rank_killed.log")
    (fault,) = of(recs, "fault_injected")
    assert fault.fields == {"fault": "SIGKILL", "target_rank": 0, "iteration": 6}
    assert fault.wall == datetime(2026, 12, 1, 10, 0, 6, 500000).timestamp(), "stamped when it fires, not when announced"
    assert [(r.event, r.fields["iteration"], r.attempt) for r in recs if r.event in ("resume", "checkpoint_load")] == [
        ("resume", 5, 1), ("checkpoint_load", 5, 1),
    ]
    m = metrics("derived/mlm_injector_rank_killed.log")
    assert (m.restarts, m.resumed_from_step, m.lost_steps, m.completed_steps) == (1, 5, 1, 10)
    assert m.detected_by == "worker_failed" and m.time_to_detect_s == pytest.approx(0.2, abs=1e-3)
    assert (m.checkpoints_saved, m.exit_reason, m.saved_at_exit) == ((5, 10), "completed", True)


def test_a_save_cut_short_is_a_begin_without_an_end():
    """Source-derived: the log ends (the rank was killed) between 'saving checkpoint' and its success line."""
    lines = (DATA / "derived/mlm_injector_rank_killed.log").read_text().splitlines()[:8]
    recs = parse_lines(lines)
    assert [(r.event, r.fields.get("iteration")) for r in recs][-1] == ("checkpoint_save_begin", 5)
    assert not of(recs, "checkpoint_save_end")


def test_rerun_state_machine_persistent_error_exits_16_then_17():
    """Source-derived: validate_result / should_checkpoint_and_exit lines of a persistent NaN on rank 1."""
    first = records("derived/mlm_rerun_exit16.log")
    reruns = [(r.fields.get("diagnosis"), r.fields["iteration"], r.fields["flagged"]) for r in of(first, "rerun")]
    assert reruns == [(None, 6, [1]), ("reproducible", 6, [1])]
    (stop,) = of(first, "exit")
    assert (stop.fields["reason"], stop.fields["code"], stop.fields["iteration"]) == ("rerun", 16, 5)
    m = metrics("derived/mlm_rerun_exit16.log")
    assert m.trainer_exit_codes == [16] and m.saved_at_exit, "the exit-16 checkpoint is written after the announcement"
    second = records("derived/mlm_rerun_exit17_other_node.log")
    assert [r.fields["diagnosis"] for r in of(second, "rerun")] == ["persistent_error"]
    assert [r.fields["code"] for r in of(second, "exit")] == [17]
    assert [r.fields["exitcode"] for r in of(second, "worker_failed")] == [17]


def test_rerun_transient_error_exits_17():
    """Source-derived: the rerun in place does not reproduce the NaN."""
    m = metrics("derived/mlm_rerun_transient_exit17.log")
    assert (m.rerun_diagnosis, m.trainer_exit_codes, m.exit_reason) == ("transient_error", [17], "rerun")


def test_bridge_straggler_reports_flag_ranks():
    """Source-derived: NVRxStragglerDetectionManager's warnings and score blocks, one report per interval."""
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


def test_sigterm_exit_after_its_checkpoint():
    """Source-derived: print_datetime('exiting program after receiving SIGTERM.') after the save."""
    recs = records("derived/mlm_sigterm_exit.log")
    assert [r.event for r in recs][-2:] == ["signal_received", "exit"]
    m = metrics("derived/mlm_sigterm_exit.log")
    assert (m.exit_reason, m.saved_at_exit, m.checkpoints_saved) == ("signal", True, (7,))


@pytest.mark.parametrize("name", sorted(p.relative_to(DATA).as_posix() for p in DATA.glob("*/*.log")))
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
    events = to_events(records("derived/bridge_async_save_then_simulated_fault.log"))
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
