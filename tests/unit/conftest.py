"""Shared fixtures of the unit tests: a launcher that forks trainer ranks from the pytest process.

A fresh `python -m trainer` pays ~5 s of imports; a rank forked from this process (torch, faker and the
trainer already imported) starts in milliseconds. Each rank gets the torchrun-style environment, its own
process group (so a kill reaches anything it started), PR_SET_PDEATHSIG (so it dies with pytest), a free
port claimed through chaos.ports (never shared between xdist workers), and its stdout/stderr in
``<run_dir>/logs/rank-<r>.log``. Every launch is joined with a hard deadline and killed at teardown.

Forking is safe only while this process has never entered an OpenMP parallel region (libgomp's pool does
not survive fork: the child hangs in a futex; measured). So the pytest process computes with one intra-op
thread: OMP_NUM_THREADS=1 before torch is imported, and torch.set_num_threads(1) before every fork.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from chaos.supervise.ports import Ports

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before any test module imports torch (see the docstring)

TINY = ("--recipe", "tiny_cpu")
PR_SET_PDEATHSIG = 1
# Variables a launcher (torchrun, ft_launcher, the chaos runner) may have left in this environment.
FOREIGN_ENV = ("TORCHELASTIC_", "FT_", "CHAOS_", "GROUP_", "ROLE_", "LOCAL_WORLD_SIZE")


def _prewarm() -> None:
    """Pay the trainer's imports once in this process, so that every forked rank inherits them."""
    import torch

    torch.set_num_threads(1)  # see the module docstring: no OpenMP pool may exist at fork

    import trainer.session  # noqa: F401
    from trainer.data import build_corpus

    build_corpus(0, 64)  # faker loads its providers on first use


@dataclass
class Launch:
    """One world of forked ranks, each running ``trainer.cli.main(argv)`` with its events in `run_dir`.

    ``child_setup(rank)`` runs in each child after fork, before the trainer: the place to monkeypatch
    the child only (the pytest process is never touched).
    """

    argv: list[str]
    world_size: int
    run_dir: Path
    child_setup: Callable[[int], None] | None = None
    pids: list[int] = field(default_factory=list)
    codes: dict[int, int] = field(default_factory=dict)
    ports: Ports | None = None

    @property
    def workdir(self) -> Path:
        return self.run_dir / "logs"

    def events(self, event: str | None = None, rank: int = 0) -> list[dict[str, Any]]:
        """This rank's events (all, or those named `event`), in order."""
        from runlog.reader import read_events

        return [e for e in read_events(self.run_dir) if e["rank"] == rank and event in (None, e["event"])]

    def losses(self, rank: int = 0) -> dict[int, float]:
        """iteration -> loss of this rank's `step` events."""
        return {e["iteration"]: e["loss"] for e in self.events("step", rank)}

    def start(self) -> Launch:
        from chaos.supervise.ports import reserve_ports

        _prewarm()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ports = reserve_ports(1)
        for rank in range(self.world_size):
            pid = os.fork()
            if pid == 0:
                self._child(rank)  # never returns
            self.pids.append(pid)
        return self

    def log(self, rank: int = 0) -> str:
        """Everything this rank printed (stdout and stderr, interleaved as written)."""
        return (self.workdir / f"rank-{rank}.log").read_text(errors="replace")

    def alive(self) -> bool:
        self._reap()
        return len(self.codes) < len(self.pids)

    def wait(self, timeout: float = 30.0) -> list[int]:
        """Exit codes by rank (negative: killed by that signal); kills everything past `timeout`."""
        deadline = time.monotonic() + timeout
        while self.alive():
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"ranks still running after {timeout}s (killed):\n{self.tails()}")
            time.sleep(0.02)
        self._release()
        return [self.codes[pid] for pid in self.pids]

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 30.0) -> None:
        """Poll `predicate` (e.g. on the event files) while the ranks run; fail if they end first."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if not self.alive():
                pytest.fail(f"ranks exited before the awaited condition:\n{self.tails()}")
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"condition not met within {timeout}s:\n{self.tails()}")
            time.sleep(0.01)

    def kill(self) -> None:
        """SIGKILL every rank's process group and reap it."""
        for pid in self.pids:
            if pid not in self.codes:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for pid in self.pids:
            if pid not in self.codes:
                with contextlib.suppress(ChildProcessError):
                    _, status = os.waitpid(pid, 0)
                    self.codes[pid] = os.waitstatus_to_exitcode(status)
        self._release()

    def _reap(self) -> None:
        for pid in self.pids:
            if pid in self.codes:
                continue
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                self.codes[pid] = os.waitstatus_to_exitcode(status)

    def _release(self) -> None:
        if self.ports is not None:
            self.ports.release()
            self.ports = None

    def tails(self) -> str:
        """The last lines of every rank's output, for failure messages."""
        out = []
        for rank in range(self.world_size):
            with contextlib.suppress(OSError):
                out.append(f"--- rank {rank} ---\n" + "\n".join(self.log(rank).splitlines()[-15:]))
        return "\n".join(out)

    def _child(self, rank: int) -> None:
        code = 70
        try:
            # Output first: fds 1/2 of an xdist worker may be its channel to the controller.
            fd = os.open(self.workdir / f"rank-{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives until os._exit
            sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
            logging.root.handlers.clear()  # pytest's capture handlers; the trainer installs its own
            gc.freeze()  # the inherited pytest heap: the trainer's gc.collect() at exit need not walk it
            os.setpgid(0, 0)
            if sys.platform.startswith("linux"):
                ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_DFL)
            for key in [k for k in os.environ if k.startswith(FOREIGN_ENV)]:
                del os.environ[key]
            os.environ.update(
                RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(self.world_size),
                MASTER_ADDR="127.0.0.1", MASTER_PORT=str(self.ports.ports[0]),
            )
            if self.child_setup is not None:
                self.child_setup(rank)
            from trainer.cli import main

            code = main(list(self.argv))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)


class Launcher:
    """What the `launch` fixture hands a test: tiny_cpu runs of forked ranks, cleaned up afterwards.

    Each run named `name` writes its events, logs and final weights under ``tmp_path/name``.
    """

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.launches: list[Launch] = []

    def start(
        self, overrides: list[str], world_size: int = 1, name: str = "run",
        child_setup: Callable[[int], None] | None = None,
    ) -> Launch:
        run_dir = self.tmp_path / name
        argv = [*TINY, f"logger.run_dir={run_dir}", *overrides]
        launch = Launch(argv, world_size, run_dir, child_setup)
        self.launches.append(launch)
        return launch.start()

    def train(self, overrides: list[str], world_size: int = 1, name: str = "run", timeout: float = 30.0) -> Launch:
        """Run to the end and require exit code 0 on every rank."""
        launch = self.start(overrides, world_size, name)
        codes = launch.wait(timeout)
        assert codes == [0] * world_size, f"exit codes {codes}:\n{launch.tails()}"
        return launch

    def close(self) -> None:
        for launch in self.launches:
            launch.kill()


@contextlib.contextmanager
def _launcher(folder: Path) -> Iterator[Launcher]:
    launcher = Launcher(folder)
    try:
        yield launcher
    finally:
        launcher.close()


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Launcher]:
    """Start trainer worlds of forked ranks; any rank still alive at teardown is killed."""
    with _launcher(tmp_path) as launcher:
        yield launcher


@pytest.fixture(scope="module")
def module_launch(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launcher]:
    """As `launch`, for a run that several tests of a module read (they copy what they change)."""
    with _launcher(tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2])) as launcher:
        yield launcher
