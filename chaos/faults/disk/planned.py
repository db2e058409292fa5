"""disk_full and storage_stall as planned and fired: the runner fills the disk; our trainer's rank stops the
storage inside its save, the runner stops a `command`'s once its step is seen."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from chaos.faults.in_rank import Rank, RankFault
from chaos.faults.outside import Armed, SignalFault, Signals
from runlog.env import STALLFS_VAR, current_attempt
from trainer.components import SavePhase

FILLER = ".chaos-disk-full"
"""The filler's name in the full folder (the trainer lists only ``iter_*`` there)."""
STORE = ".checkpoint-store"
"""The tmpfs under a stalled run's checkpoints, in its run folder: what the FUSE server serves."""


@dataclass(frozen=True)
class DiskFull(SignalFault):
    """The run's checkpoint disk (``path`` under the run folder, a tmpfs of ``disk_bytes``) filled up at the
    step, through the launcher agent's view of its mount namespace, and emptied ``duration_s`` later."""

    type = "disk_full"
    disk_bytes: int
    duration_s: float
    path: str

    def folder(self, run_dir: Path) -> Path:
        return run_dir / self.path

    def fire(self, armed: Armed, out: Signals, now: float) -> None:
        inside = _inside(armed.pids[0], self.folder(out.run_dir))
        free = _free_bytes(inside)
        leave = _newest_size(inside) // 2
        with open(inside / FILLER, "wb") as f:
            os.posix_fallocate(f.fileno(), 0, max(free - leave, 1))
        armed.next_at = now + self.duration_s

    def follow_up(self, armed: Armed, out: Signals, now: float) -> None:
        armed.next_at = None
        (_inside(armed.pids[0], self.folder(out.run_dir)) / FILLER).unlink(missing_ok=True)


def _inside(pid: int, path: Path) -> Path:
    """`path` as the mount namespace of process `pid` sees it."""
    return Path(f"/proc/{pid}/root") / path.relative_to("/")


def _free_bytes(folder: Path) -> int:
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


def _newest_size(folder: Path) -> int:
    """The bytes of the newest finished checkpoint under `folder` (0: none yet)."""
    done = sorted(p for p in folder.glob("iter_*") if p.name.removeprefix("iter_").isdigit())
    return sum(f.stat().st_size for f in done[-1].rglob("*") if f.is_file()) if done else 0


@dataclass(frozen=True)
class StorageStall(RankFault):
    """The rank stops the run's checkpoint server as its save of `at_step` begins (sync: once every rank is in
    it, its folder made; async: before anything of it reaches the storage, so DCP's writer meets the stall)
    and has its keeper resume it `stall_s` seconds later."""

    type = "storage_stall"
    stall_s: float
    store_bytes: int

    def on_save(self, rank: Rank, phase: SavePhase, iteration: int) -> None:
        if phase is not SavePhase.BEGIN or iteration != self.at_step:
            return
        served = os.environ.get(STALLFS_VAR)
        if not served:
            rank.miss(self, "the checkpoints are not served through the run's stall file system")
            return
        pid, control = served.split(":", 1)
        how = "as the async save begins" if rank.ctx.async_saves else "inside the save"
        rank.announce(self, iteration, f"storage server pid {pid} stopped for {self.stall_s:g} s ({how})")
        stall(served, self.stall_s, current_attempt())


@dataclass(frozen=True)
class StorageStallOutside(SignalFault):
    """A `command`'s checkpoint folder (``path`` under the run folder, served by the run's FUSE server)
    stopped by the runner once the command's step is seen: every file system call on it from then on blocks
    until the server's keeper resumes it ``stall_s`` seconds later (the command's next save, or the one it
    is in)."""

    type = "storage_stall_outside"
    stall_s: float
    store_bytes: int
    path: str

    def folder(self, run_dir: Path) -> Path:
        return run_dir / self.path

    def fire(self, armed: Armed, out: Signals, now: float) -> None:
        for agent in armed.pids:  # a launcher agent: the stall file system's wrapper exec'd into it
            served = out.environ(agent).get(STALLFS_VAR)
            if served:
                stall(served, self.stall_s, self.attempt)


def stall(served: str, stall_s: float, attempt: int) -> None:
    """Stop the run's storage server (``served``: its pid and its keeper's FIFO, STALLFS_VAR) and have the
    keeper resume it `stall_s` seconds later."""
    pid, control = served.split(":", 1)
    os.kill(int(pid), signal.SIGSTOP)
    _wait_stopped(int(pid))
    with open(control, "w") as fifo:
        fifo.write(f"{stall_s} {attempt}\n")


def _wait_stopped(pid: int, timeout_s: float = 1.0) -> None:
    """Until `pid` is stopped: the save's next call must find the server so."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state in ("T", "t"):
            return
        time.sleep(0.001)
