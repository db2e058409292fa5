"""Failure presets from published figures (docs/forecast.md, "Failure presets", cites each and writes the mapping down).

A preset is a failure rate per class, per GPU-hour or per node-hour; the forecast scales each by the job's
GPUs or nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from chaos.errors import BadInput
from chaos.forecast.profile import FaultClass

Per = Literal["gpu", "node"]

LLAMA3_GPUS = 16_384
LLAMA3_NODES = LLAMA3_GPUS // 8
LLAMA3_HOURS = 54 * 24
LLAMA3_CAUSES: dict[str, tuple[int, FaultClass, Per]] = {
    "faulty GPU": (148, "process_death", "gpu"),
    "GPU HBM3 memory": (72, "process_death", "gpu"),
    "software bug": (54, "process_death", "gpu"),
    "network switch/cable": (35, "hang", "node"),
    "host maintenance": (32, "preemption", "node"),
    "GPU SRAM memory": (19, "process_death", "gpu"),
    "GPU system processor": (17, "process_death", "gpu"),
    "NIC": (7, "hang", "node"),
    "NCCL watchdog timeouts": (7, "hang", "node"),
    "silent data corruption": (6, "nan_rerun", "gpu"),
    "GPU thermal interface and sensor": (6, "process_death", "gpu"),
    "SSD": (3, "storage", "node"),
    "power supply": (3, "process_death", "node"),
    "server chassis": (2, "process_death", "node"),
    "IO expansion board": (2, "process_death", "node"),
    "dependency": (2, "storage", "node"),
    "CPU": (2, "process_death", "node"),
    "system memory": (2, "process_death", "node"),
}
"""Llama 3 (Meta, 2024), Table 5: the 419 unexpected interruptions of 54 days of pre-training on 16,384
H100s, by root cause: count, the fault class it maps to, and whether it scales with GPUs or with nodes."""


@dataclass(frozen=True)
class Rate:
    """Failures per hour of one GPU (per="gpu") or one node (per="node") in a class."""

    cls: FaultClass
    per_hour: float
    per: Per


@dataclass(frozen=True)
class Failures:
    """A failure scenario: its name (what an error names) and its rates."""

    name: str
    rates: tuple[Rate, ...]

    def classes(self) -> set[FaultClass]:
        return {r.cls for r in self.rates if r.per_hour > 0}

    def job_rates(self, gpus: int, nodes: int) -> dict[FaultClass, float]:
        """Per second, for the whole job: each class's rate times the job's GPUs or nodes."""
        out: dict[FaultClass, float] = {}
        for r in self.rates:
            out[r.cls] = out.get(r.cls, 0.0) + r.per_hour * (gpus if r.per == "gpu" else nodes) / 3600.0
        return out


def llama3() -> Failures:
    rates = [Rate(cls, count / (LLAMA3_HOURS * (LLAMA3_GPUS if per == "gpu" else LLAMA3_NODES)), per)
             for count, cls, per in LLAMA3_CAUSES.values()]
    return Failures("preset llama3-16k", tuple(rates))


PRESETS = {"llama3-16k": llama3}


def preset(name: str) -> Failures:
    if name not in PRESETS:
        raise BadInput(f"--failures: unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]()


def mtbf_per_gpu(hours: float, cls: FaultClass = "process_death") -> Failures:
    """One GPU fails once in `hours` on average, each failure of class `cls` (a crash, by default)."""
    if not hours > 0:
        raise BadInput(f"--mtbf-gpu-hours: must be a positive number of hours, got {hours:g}")
    return Failures(f"--mtbf-gpu-hours {hours:g}", (Rate(cls, 1.0 / hours, "gpu"),))
