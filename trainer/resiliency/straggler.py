"""NVRx straggler detection, configured as Megatron Bridge configures it (``nvrx_straggler.*``).

On GPU, NVRx's Detector times the step's CUDA kernels with CUPTI and scores each rank against the fastest
(relative) and against its own best (individual). The Detector needs CUPTI and CUDA, so on CPU the same
report math (NVRx's ``ReportGenerator``, unpatched) is fed our own wall-clock timings of the model's
forward pass, the same kind of data the Detector hands it (per-section MIN/MAX/MED/AVG/STD/NUM in ms),
all-reduced and gathered over gloo.

Why the forward pass and not the step: a step ends in DDP's gradient all-reduce, where a fast rank waits
for the slow one, so whole-step times are nearly equal on every rank and a slowed rank would not stand
out (or its healthy peer would). The forward pass is the rank's own compute, the CPU analogue of the
kernels NVRx compares on GPU. Bridge's ``gpu_*_perf_threshold`` settings apply to those section scores.

Reports are due every ``report_time_interval`` seconds; every rank agrees on "due" through one OR-reduce
per step, because generating a report is collective. Rank 0 holds the gathered report: it logs it, writes
a ``straggler_report`` event (scores, flagged ranks), and with ``stop_if_detected`` asks the loop to save
and stop (the loop's ``stop_reason`` agreement stops every rank at the same step).
"""

from __future__ import annotations

import contextlib
import logging
import math
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from runlog import pitfalls
from runlog.log import EventLog
from runlog.records import Pitfall, StragglerReport
from trainer import nvrx_compat
from trainer.components import Component, TrainContext
from trainer.config_resiliency import NVRxStragglerDetectionConfig
from trainer.distributed import all_ranks_agree

log = logging.getLogger(__name__)

SECTION = "forward"
"""The section timed on CPU and GPU alike: the model's forward pass (the rank's own compute, no collective)."""
STOP_REASON = "straggler_detected"


@dataclass(frozen=True)
class Verdict:
    """One report as rank 0 reads it: per-rank scores by kind, and the ranks below their threshold."""

    relative: dict[int, float]
    individual: dict[int, float]
    flagged: list[int]


def summarize(durations_ms: list[float]) -> dict[Any, float]:
    """Section timings in the shape NVRx's Detector hands its ReportGenerator (keys are ``Statistic``)."""
    stat = nvrx_compat.straggler().Statistic
    return {
        stat.MIN: min(durations_ms),
        stat.MAX: max(durations_ms),
        stat.MED: statistics.median(durations_ms),
        stat.AVG: statistics.fmean(durations_ms),
        stat.STD: statistics.stdev(durations_ms) if len(durations_ms) > 1 else math.nan,
        stat.NUM: len(durations_ms),
    }


def scores_to_compute(cfg: NVRxStragglerDetectionConfig) -> list[str]:
    wanted = {"relative_perf_scores": cfg.calc_relative_gpu_perf, "individual_perf_scores": cfg.calc_individual_gpu_perf}
    return [name for name, on in wanted.items() if on]


def read_report(report: Any, cfg: NVRxStragglerDetectionConfig, gpu: bool) -> Verdict:
    """Scores and flagged ranks of an NVRx ``Report``: GPU scores on GPU, the forward section's on CPU."""
    if gpu:
        relative, individual = report.gpu_relative_perf_scores, report.gpu_individual_perf_scores
    else:
        relative = report.section_relative_perf_scores.get(SECTION, {})
        individual = report.section_individual_perf_scores.get(SECTION, {})
    found = report.identify_stragglers(
        gpu_rel_threshold=cfg.gpu_relative_perf_threshold,
        section_rel_threshold=cfg.gpu_relative_perf_threshold,
        gpu_indiv_threshold=cfg.gpu_individual_perf_threshold,
        section_indiv_threshold=cfg.gpu_individual_perf_threshold,
    )
    if gpu:
        ids = found["straggler_gpus_relative"] | found["straggler_gpus_individual"]
    else:
        ids = found["straggler_sections_relative"].get(SECTION, set()) | found[
            "straggler_sections_individual"
        ].get(SECTION, set())
    return Verdict(_plain(relative), _plain(individual), sorted(s.rank for s in ids))


def _plain(scores: Mapping[int, float]) -> dict[int, float]:
    return {int(r): round(float(s), 4) for r, s in sorted(scores.items())}


class ForwardTimer:
    """Wall-clock time of every forward pass, in ms, until ``take()`` empties it; the trainer's forward span
    (``start`` before the pass, ``stop`` after it) encloses whatever a later component adds to the pass (a
    chaos slowdown), as slower kernels would on GPU."""

    def __init__(self) -> None:
        self.durations_ms: list[float] = []
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def stop(self) -> None:
        self.durations_ms.append((time.perf_counter() - self._t0) * 1e3)

    def take(self) -> list[float]:
        taken, self.durations_ms = self.durations_ms, []
        return taken


class CpuReporter:
    """NVRx's ReportGenerator over our forward timings, on the default (gloo) process group."""

    def __init__(self, cfg: NVRxStragglerDetectionConfig, node: str):
        self.timer = ForwardTimer()
        self.generator = nvrx_compat.straggler().reporting.ReportGenerator(
            scores_to_compute=scores_to_compute(cfg), gather_on_rank0=True, node_name=node
        )

    def start_forward(self) -> None:
        self.timer.start()

    def end_forward(self) -> None:
        self.timer.stop()

    def report(self) -> Any:
        durations = self.timer.take()
        sections = {SECTION: summarize(durations)} if durations else {}
        return self.generator.generate_report(sections, {})

    def close(self) -> None: ...


class GpuReporter:
    """NVRx's Detector (CUPTI kernel timings) around each forward pass.

    Not around the whole step: its NCCL all-reduce kernels wait for the slowest rank, so on the healthy
    ranks they run longest and the healthy ranks score worst (seen on 2xH200 with rank 1 contended).
    """

    def __init__(self, cfg: NVRxStragglerDetectionConfig, node: str):
        self.detector = nvrx_compat.straggler().Detector
        self.detector.initialize(
            scores_to_compute=scores_to_compute(cfg), gather_on_rank0=True,
            profiling_interval=cfg.profiling_interval, report_time_interval=cfg.report_time_interval,
            node_name=node,
        )
        self._open = contextlib.ExitStack()

    def start_forward(self) -> None:
        self._open.enter_context(self.detector.detection_section(SECTION, profile_cuda=True))

    def end_forward(self) -> None:
        self._open.close()

    def report(self) -> Any:
        return self.detector.generate_report()

    def close(self) -> None:
        self._open.close()
        self.detector.shutdown()


class StragglerDetection(Component):
    """Periodic NVRx straggler reports; optionally stops the run (with a checkpoint) once one flags a rank."""

    name = "straggler"

    def __init__(self, cfg: NVRxStragglerDetectionConfig, events: EventLog):
        self.cfg, self.events = cfg, events
        self.reporter: CpuReporter | GpuReporter | None = None
        self.device = torch.device("cpu")
        self._last_report = time.monotonic()
        self._detected = False

    def on_train_start(self, ctx: TrainContext, start_iteration: int) -> None:
        self.device = ctx.device
        reporter = GpuReporter if self.device.type == "cuda" else CpuReporter
        self.reporter = reporter(self.cfg, self.events.node)
        self._last_report = time.monotonic()

    def before_forward(self, iteration: int, microbatch: int) -> None:
        if self.reporter is not None:
            self.reporter.start_forward()

    def after_forward(self, iteration: int, microbatch: int) -> None:
        if self.reporter is not None:
            self.reporter.end_forward()

    def after_step(self, iteration: int, loss: float) -> None:
        due = time.monotonic() - self._last_report >= self.cfg.report_time_interval
        if self.reporter is None or not all_ranks_agree(due, self.device):
            return
        self._last_report = time.monotonic()
        report = self.reporter.report()
        if report is not None:  # rank 0 holds the gathered report
            self._publish(read_report(report, self.cfg, self.device.type == "cuda"), iteration)

    def _publish(self, verdict: Verdict, iteration: int) -> None:
        self.events.write(StragglerReport(
            iteration, "gpu" if self.device.type == "cuda" else f"section:{SECTION}",
            {"relative": verdict.relative, "individual": verdict.individual}, verdict.flagged,
            {"relative": self.cfg.gpu_relative_perf_threshold, "individual": self.cfg.gpu_individual_perf_threshold},
        ))
        if self.cfg.enable_logging:
            log.info("NVRx straggler report at iteration %d: %s", iteration, self._describe(verdict))
        if verdict.flagged and not self.cfg.stop_if_detected and not self._detected:
            self.events.write(Pitfall(pitfalls.STRAGGLER_NOT_STOPPED, f"ranks {verdict.flagged} flagged at iteration {iteration}"))
        self._detected = self._detected or bool(verdict.flagged)

    def _describe(self, verdict: Verdict) -> str:
        n = self.cfg.num_gpu_perf_scores_to_print

        def worst(scores: dict[int, float]) -> str:
            return ", ".join(f"rank {r}: {s:.3f}" for r, s in sorted(scores.items(), key=lambda kv: kv[1])[:n])

        flagged = verdict.flagged or "none"
        return f"relative [{worst(verdict.relative)}]; individual [{worst(verdict.individual)}]; stragglers {flagged}"

    def stop_reason(self, iteration: int) -> str | None:
        return STOP_REASON if self.cfg.stop_if_detected and self._detected else None

    def close(self) -> None:
        if self.reporter is not None:
            self.reporter.close()
            self.reporter = None
