"""Start a launcher in its own process session, watch it, and leave nothing behind.

The launcher (ft_launcher or torchrun) runs with ``start_new_session=True`` and a marker variable
(CHAOS_RUN_ID) that every worker inherits. Its output goes to ``launcher.log``; lines that show the
launcher or NVRx's rank monitor acting on a fault become runner events, stamped as they arrive. On the
deadline, Ctrl-C or any error the whole process group is killed; afterwards any process still carrying
the marker is a leftover: it is reported (a failure of the run) and killed.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from runlog.env import RUN_ID_VAR
from runlog.log import EventLog
from runlog.records import (
    Deadline,
    FtTimeout,
    Launched,
    LauncherExit,
    LauncherLine,
    Leftover,
    Restart,
    WorkerFailed,
)

LAUNCHER_PATTERNS: list[tuple[type[LauncherLine], re.Pattern[str]]] = [
    (WorkerFailed, re.compile(r"failed \(exitcode: (?P<exitcode>-?\d+)\) local_rank: (?P<local_rank>\d+)")),
    (Restart, re.compile(r"Worker group (?:UNHEALTHY|FAILED)\. (?P<attempts_left>\d+)/\d+ attempts left; will restart")),
    (
        FtTimeout,
        re.compile(r"Did not get (?:initial|subsequent) heartbeat|Section '.+' has been open|Was out of section"),
    ),
]


@dataclass(frozen=True)
class LaunchSpec:
    command: list[str]
    env: dict[str, str]
    run_dir: Path
    deadline_s: float
    run_id: str
    cwd: Path | None = None


@dataclass
class LaunchResult:
    exit_code: int | None
    seconds: float
    timed_out: bool = False
    interrupted: bool = False
    leftovers: list[int] = field(default_factory=list)


def classify(line: str) -> LauncherLine | None:
    """The runner event a launcher line stands for (with the line's end and its numbers), or None."""
    for kind, pattern in LAUNCHER_PATTERNS:
        m = pattern.search(line)
        if m:
            return kind(line=line[-300:], **{k: int(v) for k, v in m.groupdict().items()})
    return None


def proc_environ(pid: int) -> dict[str, str]:
    """A process's environment ({} once it is gone or unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


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
        if env.get(RUN_ID_VAR) == run_id and _state(pid) not in (None, "Z"):
            found[pid] = env
    return dict(sorted(found.items()))


def marked_pids(run_id: str) -> list[int]:
    """The pids of ``marked_processes``, sorted."""
    return list(marked_processes(run_id))


def _kill_all(pgid: int, run_id: str) -> None:
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
    _kill_all(pgid, run_id)


class Launch:
    """One launcher process and its watcher; `wait()` returns when it exits or is killed."""

    def __init__(self, spec: LaunchSpec, events: EventLog, on_tick: Callable[[], None] = lambda: None):
        self.spec, self.events, self.on_tick = spec, events, on_tick
        self.log_path = spec.run_dir / "launcher.log"

    def wait(self) -> LaunchResult:
        spec = self.spec
        env = {**spec.env, RUN_ID_VAR: spec.run_id}
        start = time.monotonic()
        with open(self.log_path, "ab") as log:
            proc = subprocess.Popen(
                spec.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, cwd=spec.cwd, start_new_session=True,
            )
            self.events.write(Launched(command=spec.command, pid=proc.pid))
            reader = threading.Thread(target=self._read, args=(proc, log), daemon=True)
            reader.start()
            result = LaunchResult(exit_code=None, seconds=0.0)
            try:
                self._watch(proc, start, result)
            except BaseException:
                result.interrupted = True
                stop_group(proc.pid, spec.run_id)
                raise
            finally:
                proc.wait()
                reader.join(timeout=5)
                result.exit_code = proc.returncode
                result.seconds = time.monotonic() - start
                self.events.write(LauncherExit(proc.returncode))
                result.leftovers = self._reap(proc.pid)
                self.on_tick()
        return result

    def _watch(self, proc: subprocess.Popen, start: float, result: LaunchResult) -> None:
        while proc.poll() is None:
            if time.monotonic() - start > self.spec.deadline_s:
                result.timed_out = True
                self.events.write(Deadline(self.spec.deadline_s))
                stop_group(proc.pid, self.spec.run_id)
                return
            self.on_tick()
            time.sleep(0.1)

    def _read(self, proc: subprocess.Popen, log) -> None:
        for raw in proc.stdout:
            log.write(raw)
            log.flush()
            line = raw.decode(errors="replace").rstrip()
            hit = classify(line)
            if hit is None:
                continue
            if isinstance(hit, Restart):
                self.events.attempt += 1
            self.events.write(hit)

    def _reap(self, pgid: int) -> list[int]:
        """Wait briefly for the run's processes to go; report and kill any that stay."""
        end = time.monotonic() + 3.0
        while (left := marked_pids(self.spec.run_id)) and time.monotonic() < end:
            time.sleep(0.1)
        if left:
            self.events.write(Leftover(left))
        _kill_all(pgid, self.spec.run_id)
        return left
