"""The run's own temporary folder (its processes' TMPDIR), and the sweep of those dead runners left.

ft_launcher and its rank monitors put their IPC sockets in TMPDIR, and a killed (simulated) node never
removes them, so every run gets a folder of its own outside the run folder (a Unix socket's path must fit
in 108 bytes), removed when the run is over. The folder records its owner, the runner's pid and start
time (``owner``): the next run sweeps the folders whose owner is gone (a runner killed before its cleanup,
its watchdog too), and never touches one whose owner lives, nor one that names no owner (it may be in the
making, or belong to a harness of another version).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from chaos.supervise.procs import start_time

PREFIX = "chaos-tmp-"
OWNER = "owner"


def make_tmp_dir() -> Path:
    """A new temporary folder owned by this process."""
    folder = Path(tempfile.mkdtemp(prefix=PREFIX))
    draft = folder / f".{OWNER}"
    draft.write_text(f"{os.getpid()} {start_time(os.getpid())}\n")
    draft.rename(folder / OWNER)  # whole or absent, never half-written
    return folder


def sweep_tmp_dirs() -> list[Path]:
    """Remove the temporary folders whose owner is gone; returns them."""
    swept = []
    for folder in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        if _owner_gone(folder):
            shutil.rmtree(folder, ignore_errors=True)
            swept.append(folder)
    return swept


def _owner_gone(folder: Path) -> bool:
    try:
        pid, started = (int(x) for x in (folder / OWNER).read_text().split())
    except (OSError, ValueError):
        return False  # no owner named (yet): not ours to judge
    return start_time(pid) != started
