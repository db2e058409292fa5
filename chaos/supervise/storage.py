"""The run's storage as its faults ask for it: a bounded checkpoint disk (disk_full), or checkpoints served
through the run's FUSE file system (storage_stall), in the launch's private mount namespace.

``RunStorage.of(plan, run_dir)`` says what the launch's isolation mounts (``tmpfs``: a tmpfs per folder,
chaos/supervise/isolation.py) and what wraps each launcher agent (``wrap``: chaos/supervise/stallfs.py, which
starts the FUSE server inside the namespace before the launcher). Both end with the launch's namespace;
``mounts_outside`` names any mount of the run's folders the machine's own namespace shows (none can be
there unless something propagated out): a leftover of the run, like a process.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from chaos.faults.disk.planned import STORE, DiskFull, StorageStall, StorageStallOutside
from chaos.faults.plan import PlannedFault
from runlog.layout import RunFolder


@dataclass(frozen=True)
class RunStorage:
    tmpfs: dict[Path, int] = field(default_factory=dict)
    """Folders of the run folder mounted as tmpfs of that many bytes inside the launch's namespace."""
    wrapper: tuple[str, ...] = ()
    """What each launcher agent's command runs under (the stall file system's server and keeper)."""

    @classmethod
    def of(cls, plan: list[PlannedFault], run_dir: Path) -> RunStorage:
        """What `plan`'s storage faults need of the run (nothing when it has none); makes their folders."""
        tmpfs: dict[Path, int] = {}
        wrapper: tuple[str, ...] = ()
        checkpoints = RunFolder(run_dir).checkpoints  # our trainer's (a command names its own folder)
        for fault in plan:
            if isinstance(fault, DiskFull):
                tmpfs[fault.folder(run_dir)] = fault.disk_bytes
            elif isinstance(fault, StorageStall | StorageStallOutside) and not wrapper:
                store = run_dir / STORE
                tmpfs[store] = fault.store_bytes
                served = fault.folder(run_dir) if isinstance(fault, StorageStallOutside) else checkpoints
                wrapper = (sys.executable, "-m", "chaos.supervise.stallfs", str(run_dir), str(store), str(served), "--")
                served.mkdir(parents=True, exist_ok=True)
        for folder in tmpfs:
            folder.mkdir(parents=True, exist_ok=True)
        return cls(tmpfs, wrapper)

    def command(self, argv: list[str]) -> list[str]:
        return [*self.wrapper, *argv]


def mounts_outside(run_dir: Path) -> list[str]:
    """Mounts under the run folder that the machine's namespace shows (a run's must never be there)."""
    return [f"mount {p}" for p in sorted(mount_points(str(run_dir.resolve())))]


def mount_points(root: str) -> set[str]:
    """The machine namespace's mount points at `root` or below it."""
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return {p for p in points if p == root or p.startswith(root + "/")}
