"""A run's processes, found in /proc by the marker they all carry, and how they are stopped.

Every process the supervisor starts inherits CHAOS_RUN_ID (runlog/env.py), so the run's processes are found
wherever they are, also those that left the launcher's session: workers carry the ``RANK`` torchelastic
gives them, a simulated node's carry its CHAOS_NODE_ID, and each launcher agent leads its own session.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from runlog.env import NODE_VAR, RUN_ID_VAR


def proc_environ(pid: int) -> dict[str, str]:
    """A process's environment ({} once it is gone or unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def _status(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) of a live process, None once it is gone."""
    try:
        after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return after_name[0], int(after_name[1])


def alive(pid: int) -> bool:
    """Running or stopped, not a zombie: a zombie accepts signals but can no longer act on them."""
    status = _status(pid)
    return status is not None and status[0] != "Z"


def group_alive(pgid: int) -> bool:
    """Whether any process of the process group `pgid` is still alive (signal 0 reaches a live member)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def marked_processes(run_id: str) -> dict[int, dict[str, str]]:
    """Live processes (zombies excluded) whose environment carries this run's marker, by pid in order,
    with their environments: the one lookup of a run's processes, also those that left the launcher's
    session."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        env = proc_environ(pid)
        if env.get(RUN_ID_VAR) == run_id and alive(pid):
            found[pid] = env
    return dict(sorted(found.items()))


def marked_pids(run_id: str) -> list[int]:
    """The pids of ``marked_processes``, sorted."""
    return list(marked_processes(run_id))


def worker_pids(run_id: str, ranks: list[int] | None = None) -> list[int]:
    """The run's worker processes (those torchelastic gave a RANK), of `ranks` or of every rank.

    A worker's own children inherit its RANK; only the outermost process of each rank is returned.
    """
    workers = {pid: env["RANK"] for pid, env in marked_processes(run_id).items() if env.get("RANK", "").isdigit()}
    chosen = {pid for pid, rank in workers.items() if ranks is None or int(rank) in ranks}
    return sorted(pid for pid in chosen if (_status(pid) or ("", 0))[1] not in chosen)


def node_pids(run_id: str, node: str, ranks_only: bool = False) -> list[int]:
    """Live processes of the run on `node` (all of them, or only the ranks: those torchelastic gave a RANK)."""
    return [
        pid for pid, env in marked_processes(run_id).items()
        if env.get(NODE_VAR) == node and (not ranks_only or env.get("RANK", "").isdigit())
    ]


def session_of(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def launcher_pid(run_id: str) -> int | None:
    """The launcher: the process of the run that leads its own session (the runner started it so)."""
    return next((pid for pid in marked_pids(run_id) if session_of(pid) == pid), None)


def session_pids(run_id: str, leader: int) -> list[int]:
    """Every live process of the run in the session `leader` leads: the launcher and what it started."""
    return [pid for pid in marked_pids(run_id) if session_of(pid) == leader]


def kill_all(pgid: int, run_id: str) -> None:
    """SIGKILL to the process group and to every process of the run."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    for pid in marked_pids(run_id):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def stop_group(pgid: int, run_id: str, grace_s: float = 3.0) -> None:
    """SIGCONT (stopped ranks can't die of SIGTERM) and SIGTERM, a grace period, then SIGKILL everything."""
    for sig in (signal.SIGCONT, signal.SIGTERM):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    end = time.monotonic() + grace_s
    while time.monotonic() < end and marked_pids(run_id):
        time.sleep(0.1)
    kill_all(pgid, run_id)
