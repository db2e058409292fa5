"""The run's watchdog: however the runner ends, SIGKILL included, the run's processes end with it.

The runner starts one watchdog per run (``Watchdog.start``): a small process in a session of its own (a
signal to the runner's process group, a terminal's Ctrl-C or hangup, does not reach it) whose stdin is a
pipe only the runner writes to. The kernel closes the runner's end when the runner exits, whatever kills
it, so the watchdog's read returns then, and it

- SIGKILLs every process carrying the run's marker (CHAOS_RUN_ID) and every process in a session one of
  them leads (chaos/supervise/procs.py, ``kill_run``), until none is left: the launchers, their rank
  monitors, the workers (each in its own session), what the workers started (DataLoader workers, torch's
  multiprocessing helpers), and processes that daemonized or left the launcher's session but kept the
  environment they inherited;
- removes the run's memory cgroup (chaos/supervise/cgroup.py), its temporary folder and the port claims no
  live process holds.

A normal end closes the pipe too: the runner has reaped everything by then, and ``close`` waits for the
watchdog's sweep. Not covered: a process that both scrubbed its environment and left every session of
the run, and a runner whose watchdog was killed as well (the launcher agents still die of their
parent-death signal, chaos/supervise/deathsig.py, and the next run sweeps the folders and claims).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from chaos.supervise import cgroup
from chaos.supervise.ports import sweep_claims
from chaos.supervise.procs import kill_run

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class Watchdog:
    """The runner's side: the pipe's write end, held while the run goes."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc

    @classmethod
    def start(cls, run_id: str, tmp_dir: Path) -> Watchdog:
        path = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH")) if p)
        proc = subprocess.Popen(
            [sys.executable, "-m", "chaos.supervise.watchdog", run_id, str(tmp_dir)], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": path}, start_new_session=True,
        )
        return cls(proc)

    def close(self, timeout_s: float = 15.0) -> None:
        """The run is over: the watchdog sweeps what is left (nothing, normally) and exits."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main(run_id: str, tmp_dir: str) -> None:
    with contextlib.suppress(OSError):
        sys.stdin.buffer.read()  # returns when the runner's end of the pipe closes
    killed = kill_run(run_id)
    cgroup.remove_run(run_id)
    shutil.rmtree(tmp_dir, ignore_errors=True)
    sweep_claims()
    if killed:
        print(f"chaos watchdog: the runner of {run_id} is gone; killed {len(killed)} of its processes", file=sys.stderr)


if __name__ == "__main__":
    main(*sys.argv[1:])
