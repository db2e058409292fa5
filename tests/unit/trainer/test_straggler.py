"""Straggler detection: NVRx's report math on crafted forward timings, and the slow_rank fault's effect."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from chaos.faults.slow.slowdown import ForwardStretch, Slowdown
from chaos.judge.timeline import compute_metrics
from trainer.config_resiliency import NVRxStragglerDetectionConfig
from trainer.distributed import _free_port
from trainer.resiliency.straggler import CpuReporter, ForwardTimer, read_report, summarize

CFG = NVRxStragglerDetectionConfig(enabled=True, gpu_individual_perf_threshold=0.3)
MEDIAN_MS = {0: [10.0, 11.0, 10.5], 1: [10.2, 10.8, 10.4], 2: [52.0, 50.0, 51.0]}
"""Crafted forward timings per rank: rank 2 is five times slower than its peers."""


def _rank_report(rank: int, world: int, port: int, timings: dict[int, list[float]], out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    reporter = CpuReporter(CFG, node="test")
    reporter.timer.durations_ms = list(timings[rank])
    report = reporter.report()
    if report is not None:
        out["verdict"] = read_report(report, CFG, gpu=False)
    dist.destroy_process_group()


def gathered_verdict(timings: dict[int, list[float]]):
    """Rank 0's verdict after every rank fed its timings to NVRx's ReportGenerator over gloo."""
    with mp.Manager() as manager:
        out = manager.dict()
        mp.start_processes(
            _rank_report, args=(len(timings), _free_port(), timings, out), nprocs=len(timings), start_method="fork"
        )
        return out["verdict"]


def test_the_slowed_rank_and_only_it_is_flagged() -> None:
    verdict = gathered_verdict(MEDIAN_MS)
    assert verdict.flagged == [2]
    assert verdict.relative[2] == pytest.approx(10.4 / 51.0, abs=1e-3)
    assert verdict.relative[0] > 0.95 and verdict.relative[1] == 1.0


def test_a_healthy_world_flags_nobody() -> None:
    verdict = gathered_verdict({0: [10.0, 10.1, 9.9], 1: [10.3, 10.2, 10.4]})
    assert verdict.flagged == []
    assert min(verdict.relative.values()) > 0.95


def test_summary_has_the_statistics_nvrx_reads() -> None:
    from trainer import nvrx_compat

    stat = nvrx_compat.straggler().Statistic
    summary = summarize([3.0, 1.0, 2.0])
    assert (summary[stat.MIN], summary[stat.MED], summary[stat.MAX], summary[stat.NUM]) == (1.0, 2.0, 3.0, 3)


def test_slowdown_amounts() -> None:
    assert Slowdown(factor=3.0).extra_s(0.01, microbatches=2) == pytest.approx(0.02)
    assert Slowdown(seconds=0.1).extra_s(0.01, microbatches=4) == pytest.approx(0.025)


def test_slow_rank_stretches_the_forward_pass_the_detector_times() -> None:
    """The trainer opens the components' forward spans in their order and closes them in reverse: the
    detector's timer (an earlier component) encloses the chaos slowdown (the injector, the last one)."""
    model = torch.nn.Linear(4, 4)
    x = torch.ones(2, 4)
    timer, stretch = ForwardTimer(), ForwardStretch(Slowdown(seconds=0.05), microbatches=1)
    for spans in ([timer, stretch], [timer]):
        for span in spans:
            span.start()
        model(x)
        for span in reversed(spans):
            span.stop()
    slowed, healthy = timer.take()
    assert slowed >= 50.0 > healthy


def _report(mono: float, flagged: list[int]) -> dict:
    return {"event": "straggler_report", "rank": 0, "attempt": 0, "mono": mono, "flagged": flagged}


def test_metrics_count_reports_until_the_slowed_rank_is_flagged() -> None:
    fault = {"event": "fault_injected", "rank": 1, "attempt": 0, "mono": 2.0, "target_rank": 1}
    events = [_report(1.0, []), fault, _report(3.0, []), _report(4.0, [1]), _report(5.0, [1])]
    metrics = compute_metrics(events)
    assert (metrics.stragglers_flagged, metrics.reports_to_flag) == ([1], 2)


def test_no_report_is_not_a_clean_report() -> None:
    assert compute_metrics([{"event": "step", "rank": 0, "attempt": 0, "mono": 1.0, "iteration": 1, "loss": 1.0}]).stragglers_flagged is None
