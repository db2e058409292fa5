"""Typed event records: what each writer puts in its events, one frozen dataclass per kind of event; and
what a reader needs of a line to take it as an event (``problem``, the reader's policy: runlog/reader.py).

A record holds an event's own fields; ``EventLog.write`` adds the fields every event carries (rank,
attempt, pid, node, wall, mono). A field marked :func:`optional` is left out of the event while it is None;
every other field is written, None as null. docs/events.md lists the events and their fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from runlog import names


def optional() -> Any:
    """A field left out of the event while it is None (``node`` and ``attempt`` override the log's own)."""
    return field(default=None, kw_only=True, metadata={"optional": True})


@dataclass(frozen=True)
class Record:
    event: ClassVar[str]

    def fields(self) -> dict[str, Any]:
        """The event's own fields as written: renamed where a name is a Python keyword, ``params`` flattened."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("written") is False:
                continue
            if f.metadata.get("flatten"):
                out.update(value)
            elif value is not None or not f.metadata.get("optional"):
                out[f.metadata.get("key", f.name)] = value
        return out


def _is_async() -> Any:
    return field(metadata={"key": "async"})


# ---------------------------------------------------------------------------------------------- ranks
@dataclass(frozen=True)
class RunStart(Record):
    event = names.RUN_START
    config_digest: str
    world_size: int
    backend: str
    device: str
    launcher: str
    train_iters: int
    versions: Mapping[str, str]


@dataclass(frozen=True)
class Resume(Record):
    event = names.RESUME
    iteration: int
    path: str
    auto: bool
    local: bool | None = optional()
    """True when the checkpoint is an NVRx local (node-local, non-persistent) one."""


@dataclass(frozen=True)
class CheckpointLoad(Record):
    event = names.CHECKPOINT_LOAD
    iteration: int
    path: str
    seconds: float
    local: bool | None = optional()


@dataclass(frozen=True)
class CheckpointCorrupt(Record):
    event = names.CHECKPOINT_CORRUPT
    path: str
    reason: str


@dataclass(frozen=True)
class CheckpointSaveBegin(Record):
    event = names.CHECKPOINT_SAVE_BEGIN
    iteration: int
    path: str
    is_async: bool = _is_async()


@dataclass(frozen=True)
class CheckpointSaveEnd(Record):
    event = names.CHECKPOINT_SAVE_END
    iteration: int
    path: str
    seconds: float
    is_async: bool = _is_async()


@dataclass(frozen=True)
class CheckpointSaveFailed(Record):
    """The save of ``iteration`` failed on some rank (its storage refused a write: ``error``, the errno's text);
    every rank logs it, and ``action`` is what the trainer does next (checkpoint.on_save_failure)."""

    event = names.CHECKPOINT_SAVE_FAILED
    iteration: int
    path: str
    error: str
    action: str
    is_async: bool = _is_async()


@dataclass(frozen=True)
class LocalCheckpointSave(Record):
    """An NVRx local checkpoint of ``iteration`` is complete on every rank (this rank's file is in ``path``)."""

    event = names.LOCAL_CHECKPOINT_SAVE
    iteration: int
    path: str
    seconds: float


@dataclass(frozen=True)
class Step(Record):
    event = names.STEP
    iteration: int
    loss: float
    lr: float
    step_time: float
    consumed_samples: int


@dataclass(frozen=True)
class ObservedStep(Record):
    """A step the supervisor read from a foreign command's output (``step_pattern``): written as ``step``."""

    event = names.STEP
    iteration: int
    loss: float
    attempt: int
    """The attempt of the workers that printed it (chaos/supervise/attempts.py, ``printing``)."""
    step_time: float | None = None
    """Not observed: a command's output line states no step time."""
    observed: bool = True


@dataclass(frozen=True)
class ObservedEvent(Record):
    """An event an adapter read from a foreign trainer's output (chaos/adapters; docs/events.md, "Foreign
    trainers"): the supervisor writes it under the adapter's name with the adapter's fields."""

    name: str = field(metadata={"written": False})
    values: Mapping[str, Any] = field(default_factory=dict, metadata={"flatten": True})
    observed: bool = True

    @property
    def event(self) -> str:  # type: ignore[override]
        return self.name


@dataclass(frozen=True)
class FaultInjected(Record):
    """A fault about to fire, written (and flushed) before it: by a rank (the chaos hook, Bridge's
    simulate_fault) or by the supervisor (signal and node faults), always with this one field set."""

    event = names.FAULT_INJECTED
    fault: str
    fault_id: str
    detail: str
    iteration: int | None
    target_rank: int | None = None
    """None when aimed at several ranks, the launcher, or a node."""
    target_node: str | None = optional()
    attempt: int | None = optional()
    """The attempt it fires in, when the writer's own differs (the supervisor's)."""
    params: Mapping[str, Any] = field(default_factory=dict, kw_only=True, metadata={"flatten": True})
    """The fault kind's own fields (``grace_s``, ``ranks``, ``target``, ...), written beside the others."""


@dataclass(frozen=True)
class LinkRestored(Record):
    """A network fault's `duration_s` is over: `target_node`'s link is as it was before the fault."""

    event = names.LINK_RESTORED
    fault: str
    fault_id: str
    target_node: str


@dataclass(frozen=True)
class FaultMissed(Record):
    """A fault that came due and found nothing to strike (no process of its rank, no checkpoint to
    corrupt): it was not injected, and the run fails (written instead of its fault_injected)."""

    event = names.FAULT_MISSED
    fault: str
    fault_id: str
    reason: str
    target_rank: int | None = None
    target_node: str | None = optional()
    attempt: int | None = optional()


@dataclass(frozen=True)
class SignalReceived(Record):
    event = names.SIGNAL_RECEIVED
    signal: str
    iteration: int


@dataclass(frozen=True)
class FtTimeouts(Record):
    event = names.FT_TIMEOUTS
    heartbeat: Mapping[str, float | None]
    sections: Mapping[str, float | None]
    calculated: bool


@dataclass(frozen=True)
class StragglerReport(Record):
    event = names.STRAGGLER_REPORT
    iteration: int
    kind: str
    scores: Mapping[str, Mapping[int, float]]
    flagged: list[int]
    thresholds: Mapping[str, float]


@dataclass(frozen=True)
class InprocessStart(Record):
    event = names.INPROCESS_START
    inprocess_iteration: int
    launch_round: int


@dataclass(frozen=True)
class InprocessAbort(Record):
    event = names.INPROCESS_ABORT
    inprocess_iteration: int
    active_rank: int | None


@dataclass(frozen=True)
class Rerun(Record):
    event = names.RERUN
    state: str
    diagnosis: str | None
    iteration: int
    flagged: list[int]
    values: list[float]
    check: str | None
    initial: float | None
    code: int | None
    message: str


@dataclass(frozen=True)
class Pitfall(Record):
    """The run fell into one of the resiliency card's pitfalls (runlog/pitfalls.py names them)."""

    event = names.PITFALL
    name: str
    detail: str


@dataclass(frozen=True)
class Exit(Record):
    """The trainer stops on its own: completed, or asked to (exit_interval, signal, straggler, peer)."""

    event = names.EXIT
    reason: str
    code: int
    iteration: int
    weights_digest: str | None


@dataclass(frozen=True)
class ExitOnError(Record):
    """The trainer stops on an error: a config error (2), the rerun state machine (16, 17), an exception (1)."""

    event = names.EXIT
    reason: str
    code: int
    iteration: int | None
    error: str
    diagnosis: str | None = optional()


# ----------------------------------------------------------------------------------------- supervisor
@dataclass(frozen=True)
class Launched(Record):
    event = names.LAUNCH
    command: list[str] | None = optional()
    pid: int | None = optional()
    nodes: int | None = optional()
    network: str | None = optional()
    """The run's network: ``netns`` (its own), one per node, or the machine's with claimed ports (and why)."""


@dataclass(frozen=True)
class WorkerFailed(Record):
    event = names.WORKER_FAILED
    line: str
    exitcode: int
    local_rank: int
    node: str | None = optional()


@dataclass(frozen=True)
class Restart(Record):
    event = names.RESTART
    line: str
    attempts_left: int
    node: str | None = optional()


@dataclass(frozen=True)
class FtTimeout(Record):
    event = names.FT_TIMEOUT
    line: str
    node: str | None = optional()


@dataclass(frozen=True)
class NcclWatchdog(Record):
    """PyTorch's NCCL watchdog timed out a collective (a worker's line in the launcher's output)."""

    event = names.NCCL_WATCHDOG
    line: str
    node: str | None = optional()


LauncherLine = WorkerFailed | Restart | FtTimeout | NcclWatchdog


@dataclass(frozen=True)
class SignalSent(Record):
    event = names.SIGNAL_SENT
    signal: str
    target: int
    pid: int | None = optional()
    attempt: int | None = optional()
    group: bool | None = optional()
    """True when the signal went to the process group `target` leads."""
    storage: bool | None = optional()
    """True when `target` is the run's storage server (a storage_stall's SIGSTOP and SIGCONT), not the job's."""


@dataclass(frozen=True)
class Deadline(Record):
    event = names.DEADLINE
    seconds: float


@dataclass(frozen=True)
class LauncherExit(Record):
    event = names.LAUNCHER_EXIT
    code: int | None


@dataclass(frozen=True)
class AgentStart(Record):
    event = names.AGENT_START
    agent: str
    pid: int
    attempt_base: int
    node: str | None = optional()
    step: str | None = optional()
    """On Slurm: the job step the agent runs in, ``<job>.<step>``."""


@dataclass(frozen=True)
class AgentExit(Record):
    event = names.AGENT_EXIT
    agent: str
    code: int | None
    lost: bool
    node: str | None = optional()


@dataclass(frozen=True)
class Leftover(Record):
    event = names.LEFTOVER
    pids: list[int]
    isolation: list[str] | None = optional()
    """The run's namespaces (or links) still there after it, each with what holds it."""
    commands: list[str] | None = optional()
    """Each left process's command line (shortened), in the order of ``pids``: what stayed, not only its pid."""
