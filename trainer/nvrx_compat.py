"""The one place that knows which nvidia-resiliency-ext is installed.

0.4.1 (the newest wheel for glibc 2.36 / Python 3.11) and 0.5+ (GPU machines take 0.7.0) moved modules:
the straggler package went under `attribution`, the fault injector to `shared_utils`, and
`init_workload_monitoring` gained an argument. Everything else imports NVRx through here.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import warnings
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient

VERSION = importlib.metadata.version("nvidia-resiliency-ext")
_MAJOR_MINOR = tuple(int(p) for p in VERSION.split(".")[:2])


def straggler() -> ModuleType:
    """NVRx's straggler package (`straggler` <= 0.4.1, `attribution.straggler` from 0.5)."""
    name = "nvidia_resiliency_ext.straggler" if _MAJOR_MINOR <= (0, 4) else "nvidia_resiliency_ext.attribution.straggler"
    return importlib.import_module(name)


def inprocess() -> ModuleType:
    return importlib.import_module("nvidia_resiliency_ext.inprocess")


def local_checkpointing() -> SimpleNamespace:
    """NVRx's local checkpointing: ``TensorAwareStateDict``, ``LocalCheckpointManager`` and
    ``CheckpointingException`` (the same module paths in 0.4.1 and 0.7; 0.4.1 needs numpy, not declared)."""
    base = "nvidia_resiliency_ext.checkpointing.local"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        state_dict = importlib.import_module(f"{base}.base_state_dict")
        manager = importlib.import_module(f"{base}.ckpt_managers.local_manager")
        errors = importlib.import_module(f"{base}.ckpt_managers.base_manager")
    return SimpleNamespace(
        TensorAwareStateDict=state_dict.TensorAwareStateDict,
        LocalCheckpointManager=manager.LocalCheckpointManager,
        CheckpointingException=errors.CheckpointingException,
    )


def rank_monitor_client() -> RankMonitorClient:
    """A new RankMonitorClient. Imported here, not at this module's import: NVRx's fault_tolerance imports
    torch (2 s), and the runner, which reads this module's constants, never needs either."""
    with warnings.catch_warnings():
        # NVRx imports pynvml, which prints a FutureWarning on every import.
        warnings.simplefilter("ignore", FutureWarning)
        from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient

    return RankMonitorClient()


def init_workload_monitoring(client: RankMonitorClient) -> None:
    """Connect the client to its rank monitor (0.4.1 takes no argument, later versions optional ones)."""
    client.init_workload_monitoring()


LAUNCHER_MODULE = "nvidia_resiliency_ext.fault_tolerance.launcher"
LAUNCHER_ARGV = ("-c", f"import sys; from {LAUNCHER_MODULE} import main; sys.exit(main())")
"""How ft_launcher starts (after the interpreter): as its console script does, the module imported once by its
name. Not `python -m`: that runs it as __main__ beside the copy its rendezvous imports (``from .launcher
import UnhealthyNodeException, get_node_health_check``), two classes of the exception, so the launcher's own
``except UnhealthyNodeException`` never matches a failed health check (0.4.1 and 0.7 take their generic
branch instead) and a node health check endpoint it sets is not the one its rendezvous asks."""


def node_health_stubs() -> SimpleNamespace:
    """gRPC and the nvhcd stubs NVRx 0.7 ships for its node health check client (``pb2``, ``pb2_grpc``), for
    the harness to serve the service the client asks. ImportError naming what is missing (grpc is an optional
    NVRx dependency; 0.4.1 has no stubs)."""
    grpc = importlib.import_module("grpc")
    proto = "nvidia_resiliency_ext.shared_utils.proto"
    try:
        pb2 = importlib.import_module(f"{proto}.nvhcd_pb2")
        pb2_grpc = importlib.import_module(f"{proto}.nvhcd_pb2_grpc")
    except ModuleNotFoundError as e:
        raise ImportError(f"NVRx {VERSION} ships no nvhcd stubs ({e.name})") from e
    return SimpleNamespace(grpc=grpc, pb2=pb2, pb2_grpc=pb2_grpc)


def ft_config_section(options: dict) -> dict:
    """The launcher's `fault_tolerance:` YAML section; the NIC monitor needs NVML, absent on CPU machines.

    ``gpu_memory_reclaim_timeout`` (0.5+: after stopping workers, wait until the node's GPUs are nearly
    empty) is left to NVRx's default when None, and dropped where the launcher has no such wait (0.4.1).
    The 0.7 options of LAUNCHER_FEATURES are written only when set; the command-line ones never.
    """
    options = dict(options)
    if options.get("gpu_memory_reclaim_timeout") is None or _MAJOR_MINOR <= (0, 4):
        options.pop("gpu_memory_reclaim_timeout", None)
    for name in (*LAUNCHER_FEATURES, *LAUNCHER_CLI_ONLY):  # unset: NVRx's default (the runner refuses a set one it lacks)
        if options.get(name) is None or name in LAUNCHER_CLI_ONLY:
            options.pop(name, None)
    sections = options.get("rank_section_timeouts") or {}  # NVRx iterates it: None is not "no sections"
    return {"fault_tolerance": {**options, "rank_section_timeouts": sections, "enable_nic_monitor": False}}


RESTART_COUNT_IS_ROUND = _MAJOR_MINOR >= (0, 7)
"""Whether ft_launcher's workers get the rendezvous round as TORCHELASTIC_RESTART_COUNT (0.7's barrier
rendezvous: one count for every agent, so an agent that joins a later round starts past 0) rather than
their own agent's restarts (0.4.1's). 0.5 and 0.6 were never run here."""

SIMULATED_NODES_ENV = {"NVRX_ENABLE_MULTI_LAUNCHERS_PER_NODE": "1"}
"""0.7's rendezvous closes itself when two launchers share a host, unless told the nodes are simulated."""


LAUNCHER_FEATURES: dict[str, tuple[int, int]] = {
    "max_no_progress_cycles": (0, 7),
    "min_progress_iterations": (0, 7),
    "checkpoint_iteration_file": (0, 7),
    "no_restart_exit_code": (0, 7),
    "enable_nic_healthcheck": (0, 7),
    "link_state_path_template": (0, 7),
    "storage_healthcheck_path": (0, 7),
    "cycle_info_dir": (0, 7),
    "check_remaining_processes": (0, 7),
    "attribution_endpoint": (0, 7),
    "attribution_stop_action": (0, 7),
    "attribution_analysis_backend": (0, 7),
    "attribution_llm_api_key_file": (0, 7),
    "attribution_llm_base_url": (0, 7),
    "per_cycle_applog_prefix": (0, 7),
    "node_health_check_endpoint": (0, 7),
}
"""ft_launcher options 0.4.1's launcher lacks, with the version that has them here: progress tracking, the
no-restart exit code, the health checks before rendezvous, cycle records, the attribution service (and the
per-cycle worker logs it reads). 0.5 and 0.6 were never run here,
so each is dated by the one newer version that was (0.7.0)."""

LAUNCHER_CLI_ONLY = (
    "no_restart_exit_code", "attribution_analysis_backend", "attribution_llm_api_key_file", "attribution_llm_base_url",
    "per_cycle_applog_prefix", "node_health_check_endpoint",
)
"""Options the launcher takes on its command line alone (not from the --ft-cfg-path YAML)."""


def launcher_lacks(options: dict) -> list[str]:
    """The options set (not None) that the installed launcher does not have."""
    return [name for name, value in options.items() if value is not None and LAUNCHER_FEATURES.get(name, (0, 0)) > _MAJOR_MINOR]


def launcher_cli_options(options: dict) -> list[str]:
    """The command-line options for the set ones of LAUNCHER_CLI_ONLY (`--ft-no-restart-exit-code=93`)."""
    return [f"--ft-{name.replace('_', '-')}={options[name]}" for name in LAUNCHER_CLI_ONLY if options.get(name) is not None]
