"""ft_launcher's options as a scenario sets them (its ``ft:`` mapping)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from chaos.strict import Strict


class FTLauncherOptions(Strict):
    """ft_launcher's --ft-* options (NVRx FaultToleranceConfig names), and its restart policy."""

    initial_rank_heartbeat_timeout: float | None = Field(default=30.0, gt=0)
    rank_heartbeat_timeout: float | None = Field(default=5.0, gt=0)
    rank_section_timeouts: dict[str, Annotated[float, Field(gt=0)]] | None = None
    rank_out_of_section_timeout: float | None = Field(default=None, gt=0)
    workload_check_interval: float = Field(default=1.0, gt=0)
    safety_factor: float = Field(default=5.0, gt=0)
    """Learned timeouts (trainer ft.calc_ft_timeouts) are this factor times the longest interval observed."""
    term_timeout: float = Field(default=15.0, gt=0)
    """Seconds the launcher waits after SIGTERM before SIGKILL when it stops workers (NVRx tests use 15)."""
    gpu_memory_reclaim_timeout: float | None = Field(default=None, ge=0)
    """NVRx 0.5+: after stopping workers, wait up to this long until the node's GPUs hold almost nothing
    (None: NVRx's default, 50 s in 0.7; 0: no wait). Runs packed onto shared GPUs turn it off."""

    def detection_set(self) -> list[str]:
        """The options set away from their defaults that decide how faults are detected: all but the two about
        how the launcher runs on this machine (``MACHINE_OPTIONS``)."""
        default = type(self)()
        return [n for n in type(self).model_fields if n not in MACHINE_OPTIONS and getattr(self, n) != getattr(default, n)]


MACHINE_OPTIONS = ("term_timeout", "gpu_memory_reclaim_timeout")
"""How the launcher stops workers here, not how it detects a fault: these apply over a command's own
--ft-cfg-path too (chaos/supervise/runner.py)."""
