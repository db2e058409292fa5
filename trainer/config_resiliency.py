"""The resiliency sections of the trainer's config, named and defaulted like Megatron Bridge's: fault
tolerance, the straggler detectors, the rerun state machine, in-process restart and the fault-injection
component (trainer/config.py holds the others and the cross-field rules). No torch here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainer.config_base import ConfigError
from trainer.plugins import installed_components


@dataclass(kw_only=True)
class FaultToleranceConfig:
    """Bridge's FaultToleranceConfig (NVRx ft_launcher + RankMonitorClient)."""

    enable_ft_package: bool = False
    calc_ft_timeouts: bool = False
    use_sections: bool = False
    """Report sections setup/step/checkpointing instead of bare heartbeats."""
    simulate_fault: bool = False
    simulated_fault_type: Literal["random", "rank_hung", "rank_killed"] = "random"
    simulated_fault_rank: int | None = None
    """None: a rank chosen with rng.seed (the same on every rank, no communication)."""
    simulated_fault_base_delay: float = 0.0


@dataclass(kw_only=True)
class StragglerDetectionConfig:
    """Megatron's legacy straggler detector (Bridge's ``straggler`` section, beside ``nvrx_straggler``). Not
    implemented here: turning it on is refused, with the card's advice when nvrx_straggler is on too."""

    log_straggler: bool = False
    enable_straggler_on_startup: bool = True
    straggler_ctrlr_port: int = 65535
    straggler_minmax_count: int = 1


@dataclass(kw_only=True)
class NVRxStragglerDetectionConfig:
    enabled: bool = False
    report_time_interval: float = 300.0
    calc_relative_gpu_perf: bool = True
    calc_individual_gpu_perf: bool = True
    num_gpu_perf_scores_to_print: int = 5
    gpu_relative_perf_threshold: float = 0.7
    gpu_individual_perf_threshold: float = 0.7
    stop_if_detected: bool = False
    enable_logging: bool = True
    profiling_interval: int = 1

    def __post_init__(self) -> None:
        if self.report_time_interval <= 0:
            raise ConfigError(f"nvrx_straggler.report_time_interval: must be > 0 seconds, got {self.report_time_interval}")
        for key in ("gpu_relative_perf_threshold", "gpu_individual_perf_threshold"):
            if not 0 < getattr(self, key) <= 1:
                raise ConfigError(f"nvrx_straggler.{key}: a score threshold in (0, 1], got {getattr(self, key)}")
        if self.profiling_interval < 1:
            raise ConfigError(f"nvrx_straggler.profiling_interval: must be >= 1, got {self.profiling_interval}")
        if self.enabled and not (self.calc_relative_gpu_perf or self.calc_individual_gpu_perf):
            raise ConfigError("nvrx_straggler: enabled with no score to compute; set calc_relative_gpu_perf or calc_individual_gpu_perf")


@dataclass(kw_only=True)
class RerunStateMachineConfig:
    error_injection_rate: int = 0
    error_injection_type: Literal["correct_result", "transient_error", "persistent_error"] = "transient_error"
    rerun_mode: Literal["disabled", "validate_results", "report_determinism_stats"] = "disabled"
    check_for_nan_in_loss: bool = True
    check_for_spiky_loss: bool = False
    spiky_loss_factor: float = 10.0
    max_same_node_reruns: int = 2
    """Not Megatron's: how often a rerun from checkpoint may land on the suspicious node again (exit 16
    each time) before the run exits 17 with diagnosis same_node_loop (Megatron-LM issue #5281)."""

    def __post_init__(self) -> None:
        if self.max_same_node_reruns < 0:
            raise ConfigError(f"rerun_state_machine.max_same_node_reruns: must be >= 0, got {self.max_same_node_reruns}")


@dataclass(kw_only=True)
class InProcessRestartConfig:
    enabled: bool = False
    max_iterations: int | None = None
    monitor_thread_interval: float = 1.0
    monitor_process_interval: float = 1.0
    progress_watchdog_interval: float = 1.0
    heartbeat_interval: float = 30.0
    soft_timeout: float = 60.0
    hard_timeout: float = 90.0
    heartbeat_timeout: float = 60.0
    barrier_timeout: float = 120.0
    completion_timeout: float = 120.0
    last_call_wait: float = 1.0
    termination_grace_time: float = 1.0
    granularity: Literal["node", "rank"] = "node"

    def __post_init__(self) -> None:
        """NVRx's Wrapper asserts these orderings with a bare AssertionError; say which value to change."""
        if self.max_iterations is not None and self.max_iterations < 1:
            raise ConfigError(f"inprocess_restart.max_iterations: must be >= 1 or null, got {self.max_iterations}")
        for shorter, longer in INPROCESS_ORDER:
            a, b = getattr(self, shorter), getattr(self, longer)
            if not a < b:
                raise ConfigError(
                    f"inprocess_restart.{shorter} ({a:g}) must be < inprocess_restart.{longer} ({b:g}); "
                    f"lower {shorter} or raise {longer}"
                )


INPROCESS_ORDER = (
    ("soft_timeout", "hard_timeout"),
    ("hard_timeout", "barrier_timeout"),
    ("heartbeat_interval", "heartbeat_timeout"),
    ("heartbeat_timeout", "barrier_timeout"),
    ("monitor_process_interval", "heartbeat_timeout"),
    ("monitor_process_interval", "soft_timeout"),
    ("monitor_thread_interval", "soft_timeout"),
    ("progress_watchdog_interval", "soft_timeout"),
)
"""Pairs that must hold `first < second`: the orderings NVRx's inprocess.Wrapper requires."""


@dataclass(kw_only=True)
class FaultInjectionConfig:
    """A fault injector installed beside the trainer (trainer/plugins.py). Nothing is injected unless the
    config names both the component and the plan it fires (the chaos runner sets them; a scenario cannot)."""

    component: str | None = None
    """An installed component (entry point group trainer.components), e.g. chaos."""
    plan: str | None = None
    """The fault plan file the component reads."""

    def __post_init__(self) -> None:
        if (self.component is None) != (self.plan is None):
            given, missing = ("component", "plan") if self.plan is None else ("plan", "component")
            raise ConfigError(f"fault_injection.{given} is set but fault_injection.{missing} is not: give both or neither")
        if self.component is not None and self.component not in installed_components():
            known = ", ".join(installed_components()) or "none"
            raise ConfigError(f"fault_injection.component: {self.component!r} is not installed (installed: {known})")
