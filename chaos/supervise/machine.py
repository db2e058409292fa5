"""What a run's faults change on the machine beyond the launches' namespaces, owned by the runner for the whole
run: the run's memory cgroup (chaos/supervise/cgroup.py), with one teardown (``close``) that says what of the
run is left on the machine: a cgroup, or a mount of its folders in the machine's namespace (the storage its
faults ask each launch for, chaos/supervise/storage.py, lives and ends in the launch's), or a mount on
/sys/class that was not there before the run (a launch's fake NICs, nic_link_down, live in its namespace).

``lacks`` tells, before anything is launched, why this machine cannot give a scenario's faults what they
need (a privilege, a kernel feature, a package), so the run is refused and its test skipped with that reason.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from chaos.faults.memory.planned import HostOom
from chaos.faults.plan import PlannedFault
from chaos.supervise import cgroup
from chaos.supervise.isolation import Isolation, IsolationUnavailable
from chaos.supervise.node_health import unavailable as node_health_unavailable
from chaos.supervise.storage import mount_points, mounts_outside
from runlog.env import MEMORY_CGROUP_VAR
from runlog.log import EventLog

STORAGE_KINDS = {"disk_full", "storage_stall"}
SYS_CLASS = "/sys/class"


@dataclass
class RunMachine:
    memory: cgroup.OomWatch | None
    run_dir: Path
    run_id: str
    sys_class: set[str]
    """The machine's mounts on /sys/class before the run (a launch's fake NICs mount there, in its namespace)."""

    @classmethod
    def start(cls, plan: list[PlannedFault], run_dir: Path, events: EventLog) -> RunMachine:
        cgroup.sweep()  # what runners killed with their watchdogs left
        oom = next((f for f in plan if isinstance(f, HostOom)), None)
        memory = None
        if oom is not None:
            where = cgroup.hierarchy()
            if isinstance(where, str):
                raise IsolationUnavailable(where)
            memory = cgroup.OomWatch(cgroup.MemoryCgroup.create(where, run_dir.name, oom.limit_bytes), run_dir, events)
        return cls(memory, run_dir, run_dir.name, mount_points(SYS_CLASS))

    @property
    def env(self) -> dict[str, str]:
        """What the run's processes are told of it (the memory cgroup a host_oom rank joins)."""
        return {} if self.memory is None else {MEMORY_CGROUP_VAR: str(self.memory.cgroup.path)}

    def tick(self) -> None:
        if self.memory is not None:
            self.memory.tick()

    def close(self) -> list[str]:
        """Undo what the run changed; returns what of it is still there (a leftover of the run)."""
        if self.memory is not None:
            self.memory.tick()  # an OOM kill in the run's last moments
            self.memory.cgroup.remove()
        left = [f"cgroup {p}" for p in cgroup.of_run(self.run_id)]
        left += [f"mount {p}" for p in sorted(mount_points(SYS_CLASS) - self.sys_class)]
        return left + mounts_outside(self.run_dir)


def lacks(kinds: set[str]) -> str | None:
    """Why this machine cannot run faults of `kinds`, or None."""
    if "host_oom" in kinds:
        where = cgroup.hierarchy()
        if isinstance(where, str):
            return f"host_oom needs a memory cgroup of the run: {where}"
    if kinds & STORAGE_KINDS:
        reason = _no_private_tmpfs()
        if reason is not None:
            wanted = sorted(kinds & STORAGE_KINDS)
            return f"{', '.join(wanted)} need{'s' if len(wanted) == 1 else ''} a private mount namespace with a tmpfs: {reason}"
    if "nic_link_down" in kinds and (reason := _no_fake_nics()) is not None:
        return f"nic_link_down needs a private mount namespace with its own /sys/class/infiniband: {reason}"
    if "node_unhealthy" in kinds and (reason := node_health_unavailable()) is not None:
        return reason
    if "storage_stall" in kinds:
        return _no_fuse()
    return None


def _no_private_tmpfs() -> str | None:
    with tempfile.TemporaryDirectory(prefix="chaos-probe-") as folder:
        try:
            Isolation(network=False, tmpfs={Path(folder): 1 << 20}).start(os.environ, "probe").close()
        except IsolationUnavailable as e:
            return str(e)
    return None


def _no_fake_nics() -> str | None:
    try:
        Isolation(network=False, infiniband=("probe",)).start(os.environ, "probe").close()
    except IsolationUnavailable as e:
        return str(e)
    return None


def _no_fuse() -> str | None:
    if not Path("/dev/fuse").exists():
        return "storage_stall needs FUSE: no /dev/fuse on this machine"
    try:
        import fuse  # noqa: F401 - fusepy loads libfuse 2 when imported
    except ImportError:
        return "storage_stall needs fusepy (pip install fusepy; a project dependency)"
    except OSError as e:
        return f"storage_stall needs libfuse 2 (apt-get install libfuse2): {e}"
    return None
