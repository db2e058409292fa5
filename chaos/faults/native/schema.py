"""Native faults as a scenario writes them: segfault, abort, gil_deadlock."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from chaos.faults.native import planned as fired
from chaos.faults.spec import FaultSpec, require_at_step


class Segfault(FaultSpec):
    """The rank dies of SIGSEGV raised in native code (a NULL read through ctypes), at its step or after its delay."""

    type: Literal["segfault"]
    planned = fired.Segfault


class Abort(FaultSpec):
    """The rank dies of SIGABRT raised in native code (libc's abort()), at its step or after its delay."""

    type: Literal["abort"]
    planned = fired.Abort


class GilDeadlock(FaultSpec):
    """The rank's main thread deadlocks in C with the GIL held, at its step: its Python threads stop too."""

    type: Literal["gil_deadlock"]
    planned = fired.GilDeadlock

    @model_validator(mode="after")
    def _one_trigger(self) -> GilDeadlock:
        require_at_step(self)  # the main thread must be the one that deadlocks: a delay fires from a timer thread
        return self
