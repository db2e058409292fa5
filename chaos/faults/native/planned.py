"""Native faults as the injector fires them: real C calls through ctypes, not os.kill or a Python exception."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import ClassVar

from chaos.faults.in_rank import Rank, RankFault

MUTEX_BYTES = 64
"""Room for a pthread_mutex_t (40 bytes on x86_64 glibc, 48 on aarch64); all zeros is PTHREAD_MUTEX_INITIALIZER."""


@dataclass(frozen=True)
class _NativeCrash(RankFault):
    """The rank crashes inside a C call: the kernel delivers `signal` and the process dies of it (Python's
    faulthandler, when enabled, prints the stack first and re-raises it)."""

    signal: ClassVar[signal.Signals]
    how: ClassVar[str]

    def before_step(self, rank: Rank, iteration: int) -> None:
        if iteration == self.at_step:
            self._crash(rank, iteration, f"at step {iteration}")

    def after_delay(self, rank: Rank, iteration: int) -> None:
        self._crash(rank, iteration, f"after {self.delay_s:.2f}s")

    def _crash(self, rank: Rank, iteration: int, when: str) -> None:
        import resource

        rank.announce(self, iteration, f"{self.signal.name} in native code {when}: {self.how}")
        _, hard = resource.getrlimit(resource.RLIMIT_CORE)
        resource.setrlimit(resource.RLIMIT_CORE, (0, hard))  # no core file left in the run folder
        self.strike()

    def strike(self) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class Segfault(_NativeCrash):
    """A NULL pointer read in C: SIGSEGV."""

    type = "segfault"
    signal = signal.SIGSEGV
    how = "a NULL read (ctypes.string_at(0))"

    def strike(self) -> None:
        import ctypes

        ctypes.string_at(0)


@dataclass(frozen=True)
class Abort(_NativeCrash):
    """libc's abort(), as a failed C assertion calls it: SIGABRT."""

    type = "abort"
    signal = signal.SIGABRT
    how = "libc abort()"

    def strike(self) -> None:
        import ctypes

        ctypes.CDLL(None).abort()


@dataclass(frozen=True)
class GilDeadlock(RankFault):
    """The rank's main thread deadlocks in C with the GIL held: it locks a pthread mutex it already holds,
    through ctypes.PyDLL (whose calls keep the GIL). A mutex wait is not interrupted by signals, so neither
    the rank's Python signal handlers nor any of its threads run again; only SIGKILL (or a signal whose
    default action ends the process) ends it."""

    type = "gil_deadlock"

    def before_step(self, rank: Rank, iteration: int) -> None:
        import ctypes

        if iteration != self.at_step:
            return
        rank.announce(self, iteration, f"at step {iteration}: the main thread locks a mutex it holds, in C, GIL held")
        libc = ctypes.PyDLL(None)
        mutex = ctypes.create_string_buffer(MUTEX_BYTES)
        libc.pthread_mutex_lock(mutex)
        libc.pthread_mutex_lock(mutex)
