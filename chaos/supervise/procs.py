"""A run's processes, found in /proc by the marker they all carry, and how they are stopped.

Every process the supervisor starts inherits CHAOS_RUN_ID (runlog/env.py), so the run's processes are found
wherever they are, also those that left the launcher's session: workers carry the ``RANK`` torchelastic
gives them (and lead sessions of their own: torchelastic starts each one with ``start_new_session``), a
simulated node's carry its CHAOS_NODE_ID, and each launcher agent leads its own session.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from runlog.env import ATTEMPT_BASE_VAR, NODE_VAR, RESTART_COUNT_VAR, RUN_ID_VAR


def proc_environ(pid: int) -> dict[str, str]:
    """A process's environment ({} once it is gone or unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def command_line(pid: int, width: int = 160) -> str:
    """`pid`'s command line, its arguments space-joined and cut to `width`; ``?`` once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    line = raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace") or "?"
    return line if len(line) <= width else line[: width - 3] + "..."


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (from the state on), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _status(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) of a live process, None once it is gone."""
    fields = _stat(pid)
    return None if fields is None else (fields[0], int(fields[1]))


def start_time(pid: int) -> int | None:
    """When the process started (clock ticks since boot): with the pid, an identity no later process reuses."""
    fields = _stat(pid)
    return None if fields is None else int(fields[19])


def parent(pid: int) -> int | None:
    """The parent pid of a process, None once it is gone."""
    status = _status(pid)
    return None if status is None else status[1]


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


def worker_pids(run_id: str, ranks: list[int] | None = None, round_: int | None = None) -> dict[int, int]:
    """The run's worker processes (those torchelastic gave a RANK), of `ranks` or of every rank, as
    pid -> rank; with `round_`, only the workers of that launcher round (CHAOS_ATTEMPT_BASE plus
    TORCHELASTIC_RESTART_COUNT: the round a restart line announced), not a dying one of the round before.

    A worker's own children inherit its RANK; only the outermost process of each rank is returned.
    """
    workers = {
        pid: int(env["RANK"]) for pid, env in marked_processes(run_id).items()
        if env.get("RANK", "").isdigit() and (round_ is None or round_of(env) == round_)
    }
    chosen = {pid: rank for pid, rank in workers.items() if ranks is None or rank in ranks}
    return {pid: rank for pid, rank in chosen.items() if (_status(pid) or ("", 0))[1] not in chosen}


def round_of(env: dict[str, str]) -> int | None:
    """The launcher round a process of the run belongs to (a worker's, and its children's: they inherit it)."""
    try:
        return int(env.get(ATTEMPT_BASE_VAR, "0")) + int(env.get(RESTART_COUNT_VAR, "0"))
    except ValueError:
        return None


def node_pids(run_id: str, node: str, ranks_only: bool = False) -> list[int]:
    """Live processes of the run on `node` (all of them, or only the ranks: those torchelastic gave a RANK)."""
    return [
        pid for pid, env in marked_processes(run_id).items()
        if env.get(NODE_VAR) == node and (not ranks_only or env.get("RANK", "").isdigit())
    ]


def node_ranks(run_id: str, node: str, round_: int) -> dict[int, int]:
    """The processes of the ranks on `node` of launcher round `round_` (with what they started), pid -> rank."""
    return {
        pid: int(env["RANK"]) for pid, env in marked_processes(run_id).items()
        if env.get(NODE_VAR) == node and env.get("RANK", "").isdigit() and round_of(env) == round_
    }


def session_of(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def launcher_pid(run_id: str) -> int | None:
    """The launcher: the process of the run that leads its own session (the runner started it so) and is no
    worker (torchelastic starts every worker in a session of its own too)."""
    return next((pid for pid, env in marked_processes(run_id).items() if session_of(pid) == pid and "RANK" not in env), None)


def session_pids(run_id: str, leader: int) -> list[int]:
    """Every live process of the run in the session `leader` leads: the launcher and what it started."""
    return [pid for pid in marked_pids(run_id) if session_of(pid) == leader]


def stop_group(pgid: int, run_id: str, grace_s: float = 3.0) -> None:
    """SIGCONT (stopped ranks can't die of SIGTERM) and SIGTERM to the process group, a grace period, then
    SIGKILL to it and to everything of the run. `pgid` is a leader the caller has not reaped: a reaped
    process's number may be another process group's by now (pids wrap at 32768 on this machine)."""
    for sig in (signal.SIGCONT, signal.SIGTERM):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    end = time.monotonic() + grace_s
    while time.monotonic() < end and marked_pids(run_id):
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    kill_run(run_id)


def kill_run(run_id: str, timeout_s: float = 10.0) -> list[int]:
    """SIGKILL every process of the run and every process in a session one of them leads (a worker's
    session holds what it started, marked or not), again until none is left or `timeout_s` passes: a
    launcher that is still alive may start more. Returns the pids it signalled."""
    killed: set[int] = set()
    end = time.monotonic() + timeout_s
    while (victims := _run_and_its_sessions(run_id)) and time.monotonic() < end:
        for pid in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed |= victims
        time.sleep(0.05)
    return sorted(killed)


def _run_and_its_sessions(run_id: str) -> set[int]:
    marked = set(marked_processes(run_id))
    led = {pid for pid in marked if session_of(pid) == pid}
    if not led:
        return marked
    members = {int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit() and session_of(int(e.name)) in led}
    return (marked | {pid for pid in members if alive(pid)}) - {os.getpid()}
