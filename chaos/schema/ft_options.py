"""ft_launcher's options as a scenario sets them (its ``ft:`` mapping)."""

from __future__ import annotations

from typing import Annotated, Literal

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

    # NVRx 0.7's launcher (trainer/nvrx_compat.py, LAUNCHER_FEATURES): None leaves NVRx's default; a scenario
    # that sets one is skipped where the installed launcher lacks it. `{run_dir}` in a path is the run folder.
    max_no_progress_cycles: int | None = None
    """Progress tracking: stop restarting, with the no-restart exit code, after this many consecutive cycles
    (cycle 0 included) whose checkpoint iteration did not grow (NVRx's default 3; <= 0 turns it off).
    Inactive without ``checkpoint_iteration_file``."""
    min_progress_iterations: int | None = Field(default=None, ge=1)
    checkpoint_iteration_file: str | None = None
    """The file holding the latest checkpointed iteration: our trainer's and Megatron's is
    ``{run_dir}/checkpoints/latest_checkpointed_iteration.txt``."""
    no_restart_exit_code: int | None = Field(default=None, ge=1, le=255)
    """The launcher's exit code when NVRx decides the job must not be restarted (default 93)."""
    storage_healthcheck_path: str | None = None
    """Comma-separated absolute paths the launcher checks exist and can be listed before each rendezvous."""
    enable_nic_healthcheck: bool | None = None
    link_state_path_template: str | None = None
    """Where the NIC health check reads a port's state, ``{nic}`` the device name (NVRx's default
    /sys/class/infiniband/{nic}/ports/1/state)."""
    cycle_info_dir: str | None = None
    """Where the launcher writes its own record of each cycle (cycle_info.<job>.<attempt>.<cycle> JSON files):
    the judge checks them against the attempts it saw (chaos/judge/launcher_records.py)."""
    check_remaining_processes: bool | None = None
    attribution_endpoint: str | None = None
    """``localhost``: the launcher starts NVRx's attribution service (nvrx-attrsvc on port 50050 of its network:
    each run has its own) and submits each cycle's log to it; needs ``per_cycle_applog_prefix`` and an LLM API
    key file."""
    attribution_stop_action: Literal["log", "no-restart"] | None = None
    """What the launcher does with the service's STOP verdict: ``no-restart`` ends the job with the no-restart
    exit code (NVRx's default ``log`` only records it)."""
    attribution_analysis_backend: Literal["lib"] | None = None
    attribution_llm_api_key_file: str | None = None
    """The service's LLM key file (it must exist; ``{project}`` is this project's folder)."""
    attribution_llm_base_url: str | None = None
    per_cycle_applog_prefix: str | None = None
    """Where the launcher writes the workers' output, one file per cycle (the logs attribution reads)."""

    def detection_set(self) -> list[str]:
        """The options set away from their defaults that decide how faults are detected: all but the two about
        how the launcher runs on this machine (``MACHINE_OPTIONS``)."""
        default = type(self)()
        return [n for n in type(self).model_fields if n not in MACHINE_OPTIONS and getattr(self, n) != getattr(default, n)]


RUN_DIR_PATHS = (
    "checkpoint_iteration_file", "storage_healthcheck_path", "link_state_path_template", "cycle_info_dir",
    "attribution_llm_api_key_file", "per_cycle_applog_prefix",
)
"""The options whose `{run_dir}` the runner replaces with the run folder (and `{project}` with this project's)."""

MACHINE_OPTIONS = ("term_timeout", "gpu_memory_reclaim_timeout")
"""How the launcher stops workers here, not how it detects a fault: these apply over a command's own
--ft-cfg-path too (chaos/supervise/runner.py)."""
