"""The registry of fault kinds: each kind as a scenario's author writes it (``faults:``), with its own rules,
how it is planned (``plan``: its random choices drawn from the scenario's seed), and who fires it (``planned``:
its class on that side, chaos/hooks/faults.py inside the ranks or chaos/supervise/faults.py outside).

``FAULT_KINDS`` is the registry; a new kind is one class here and one class on the side that fires it
(docs/architecture.md walks through one).
"""

from __future__ import annotations

import random
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import Field, model_validator

from chaos.hooks import faults as in_rank
from chaos.schema.base import Strict
from chaos.schema.plan import PlannedFault
from chaos.supervise import faults as outside
from runlog.env import node_id, node_name


class _FaultBase(Strict):
    rank: int | None = Field(default=None, ge=0)
    """The target rank; None lets the seeded plan choose (random only)."""
    at_step: int | None = Field(default=None, ge=1)
    """Fire just before this step (1-based) computes."""
    after_s: float | None = Field(default=None, ge=0)
    """Fire after base_delay + 0.2*U(0,1)*base_delay seconds (Megatron Bridge's simulate_fault timing)."""
    attempt: int = Field(default=0, ge=0)
    """The restart round in which the fault fires (0: the first launch)."""

    planned: ClassVar[type[PlannedFault]]
    """The kind as planned and fired: its class on the side that fires it."""

    @model_validator(mode="after")
    def _one_trigger(self) -> _FaultBase:
        if (self.at_step is None) == (self.after_s is None):
            raise ValueError("give exactly one trigger: at_step or after_s")
        return self

    def plan(self, fault_id: str, rng: random.Random, world_size: int) -> PlannedFault:
        """This fault with every random choice drawn from `rng` (the kind and rank of random, then the
        jitter of after_s, fault by fault in the scenario's order)."""
        return self._planned(self.planned, fault_id, self.rank, rng)

    def _planned(self, kind: type[PlannedFault], fault_id: str, rank: int | None, rng: random.Random) -> PlannedFault:
        delay = None if self.after_s is None else self.after_s + 0.2 * rng.random() * self.after_s
        return kind(fault_id=fault_id, rank=rank, attempt=self.attempt, at_step=self.at_step, delay_s=delay, **self._own())

    def _own(self) -> dict[str, Any]:
        """The kind's own fields, named as its planned class names them."""
        return self.model_dump(exclude={"type", "rank", "attempt", "at_step", "after_s"})


class RankKilled(_FaultBase):
    """SIGKILL to the rank (a crashed process)."""

    type: Literal["rank_killed"]
    planned = in_rank.RankKilled


class RankHung(_FaultBase):
    """SIGSTOP to the rank (a hung process: alive, silent)."""

    type: Literal["rank_hung"]
    planned = in_rank.RankHung


class RandomFault(_FaultBase):
    """rank_killed or rank_hung on a rank, both chosen from the scenario seed."""

    type: Literal["random"]
    planned = in_rank.RankKilled
    """Or RankHung: drawn at planning."""

    def plan(self, fault_id: str, rng: random.Random, world_size: int) -> PlannedFault:
        kind = rng.choice([in_rank.RankHung, in_rank.RankKilled])
        rank = self.rank if self.rank is not None else rng.randrange(world_size)
        return self._planned(kind, fault_id, rank, rng)


class ExceptionFault(_FaultBase):
    """A Python exception raised in the step on the rank (a bug, a failed assertion): the rank exits 1."""

    type: Literal["exception"]
    planned = in_rank.ExceptionFault
    message: str = "injected by the chaos plan"

    @model_validator(mode="after")
    def _one_trigger(self) -> ExceptionFault:
        _require_at_step(self)  # raised inside the step: a delay fires from a timer thread, which has no step to fail
        return self


def _require_at_step(fault: _FaultBase) -> None:
    if fault.at_step is None or fault.after_s is not None:
        raise ValueError(f"{fault.type} fires at a step: give at_step (not after_s)")


def _require_load_trigger(fault: _FaultBase) -> None:
    if fault.at_step is not None or fault.after_s is not None:
        raise ValueError(f"{fault.type} fires at the checkpoint load of its attempt: leave out at_step and after_s")
    if fault.attempt < 1:
        raise ValueError(f"{fault.type} breaks a restart's checkpoint load: attempt must be 1 or more")


class CollectiveHang(_FaultBase):
    """The rank stops inside the gradient all-reduce of `at_step` (right before it, its peers waiting inside it)."""

    type: Literal["collective_hang"]
    planned = in_rank.CollectiveHang

    @model_validator(mode="after")
    def _one_trigger(self) -> CollectiveHang:
        _require_at_step(self)
        return self


class FaultDuringCheckpoint(_FaultBase):
    """SIGKILL to the rank while a checkpoint is in flight: the save of `at_step` (sync: inside the save;
    async: after the save was issued, before it is sealed), the NVRx local save of `at_step` (inside this
    rank's write), or the checkpoint load of `attempt`."""

    type: Literal["fault_during_checkpoint"]
    planned = in_rank.FaultDuringCheckpoint
    during: Literal["save", "local_save", "load"] = "save"

    @model_validator(mode="after")
    def _one_trigger(self) -> FaultDuringCheckpoint:
        if self.during == "load":
            _require_load_trigger(self)
        else:
            _require_at_step(self)
        return self


class CheckpointCorrupt(_FaultBase):
    """The newest checkpoint truncated or garbled by `rank` just before the load of `attempt`."""

    type: Literal["checkpoint_corrupt"]
    planned = in_rank.CheckpointCorrupt
    rank: int | None = Field(default=0, ge=0)
    mode: Literal["truncate", "garble"] = "truncate"

    @model_validator(mode="after")
    def _one_trigger(self) -> CheckpointCorrupt:
        _require_load_trigger(self)
        return self


class LocalCheckpointLost(_FaultBase):
    """The rank's node loses its local checkpoint folder (a replaced node, a wiped NVMe or tmpfs) just before
    the checkpoint load of `attempt`: the resume must fall back to the persistent checkpoint."""

    type: Literal["local_checkpoint_lost"]
    planned = in_rank.LocalCheckpointLost

    @model_validator(mode="after")
    def _one_trigger(self) -> LocalCheckpointLost:
        _require_load_trigger(self)
        return self


class _SignalFault(_FaultBase):
    """A real signal sent by the runner from outside to real pids: to `rank`, to `ranks`, or to a
    `target` (all ranks, or the launcher). Works on any training command, not only this project's."""

    ranks: list[Annotated[int, Field(ge=0)]] | None = Field(default=None, min_length=1)
    target: Literal["all", "launcher"] | None = None
    process_group: bool = False
    """To the process group each target leads (a rank's data-loader workers too), as a scheduler signals a job."""

    @model_validator(mode="after")
    def _one_target(self) -> _SignalFault:
        given = [name for name in ("rank", "ranks", "target") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one target: rank, ranks or target (all | launcher)")
        return self


class Sigterm(_SignalFault):
    """Preemption: SIGTERM, then SIGKILL to whatever is still alive `grace_s` seconds later."""

    type: Literal["sigterm"]
    planned = outside.Sigterm
    grace_s: float = Field(default=30.0, ge=0)


class Sigkill(_SignalFault):
    """SIGKILL from outside (an OOM killer, a node agent)."""

    type: Literal["sigkill"]
    planned = outside.Sigkill


class Sigstop(_SignalFault):
    """SIGSTOP from outside: the processes hang until something kills them."""

    type: Literal["sigstop"]
    planned = outside.Sigstop


class DutyCycle(_SignalFault):
    """Slowness from outside: `cycles` rounds of SIGSTOP for `stop_s`, then SIGCONT for `run_s`."""

    type: Literal["duty_cycle"]
    planned = outside.DutyCycle
    stop_s: float = Field(gt=0)
    run_s: float = Field(gt=0)
    cycles: int = Field(ge=1)


class _NodeFault(_FaultBase):
    """A fault of a whole node of a multi-node scenario (chaos/supervise/nodes.py), delivered by the runner.

    Node 0 hosts the c10d rendezvous store (as the first node of a cluster job does), so it cannot be lost:
    its store is the rendezvous itself."""

    node: int = Field(ge=1)

    def _own(self) -> dict[str, Any]:
        return {"target_node": node_name(self.node)}


class NodeKilled(_NodeFault):
    """SIGKILL to the node's launcher agent and every process it started (a node lost)."""

    type: Literal["node_killed"]
    planned = outside.NodeKilled


class NodeHung(_NodeFault):
    """SIGSTOP to every rank of the node: its agent lives on, its ranks go silent."""

    type: Literal["node_hung"]
    planned = outside.NodeHung


class NodeRejoin(_NodeFault):
    """A replacement agent for a killed node joins the rendezvous, `after_s` into round `attempt`."""

    type: Literal["node_rejoin"]
    planned = outside.NodeRejoin

    @model_validator(mode="after")
    def _one_trigger(self) -> NodeRejoin:
        if self.after_s is None or self.at_step is not None:
            raise ValueError("node_rejoin fires by time in the round after the loss: give after_s (not at_step)")
        if self.attempt < 1:
            raise ValueError("node_rejoin joins a later rendezvous round: attempt must be 1 or more")
        return self


class SlurmKillStep(_FaultBase):
    """`scancel --signal=KILL <job>.<step>` from the submitting host: every process of the job's running
    step (launcher agents, rank monitors, ranks) is killed at once; the batch script sees srun fail and,
    with `slurm.job_retries`, requeues the job (requires: slurm)."""

    type: Literal["slurm_kill_step"]
    planned = outside.SlurmKillStep


class SlurmRequeue(_FaultBase):
    """`scontrol requeue <job>` from the submitting host: Slurm stops the running job and starts it again
    in the same run folder, a new job launch that resumes from the checkpoints (requires: slurm)."""

    type: Literal["slurm_requeue"]
    planned = outside.SlurmRequeue


class SlowRank(_FaultBase):
    """The rank computes slower from its trigger on (chaos/hooks/slow_rank.py): each forward pass `factor` times
    as long, or `seconds` more per step, on CPU; a competing CUDA stream on its device on GPU."""

    type: Literal["slow_rank"]
    planned = in_rank.SlowRank
    factor: float | None = Field(default=None, gt=1)
    seconds: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_amount(self) -> SlowRank:
        if (self.factor is None) == (self.seconds is None):
            raise ValueError("give exactly one slowdown: factor (> 1) or seconds (> 0 per step)")
        _require_at_step(self)  # the slowdown is armed before a step, in the step's thread
        return self


class _LossFault(_FaultBase):
    """The rank's loss corrupted before its backward at `at_step` (the trainer's on_loss hook): `transient`
    in the first computation of the step only, `persistent` in every computation on the faulty node (the
    first launch's node identity), whatever the attempt; a relaunch with another CHAOS_NODE_ID is clean."""

    persistence: Literal["transient", "persistent"] = "transient"

    @model_validator(mode="after")
    def _at_step_only(self) -> _LossFault:
        _require_at_step(self)
        return self

    def _own(self) -> dict[str, Any]:
        # The faulty hardware: the planning machine's node identity, the first launch's (a relaunch may move).
        return {**super()._own(), "faulty_node": node_id() if self.persistence == "persistent" else None}


class NanLoss(_LossFault):
    """The loss becomes NaN (and so do the gradients): the rerun state machine's NaN check."""

    type: Literal["nan_loss"]
    planned = in_rank.NanLoss


class SpikyLoss(_LossFault):
    """The loss is multiplied by `factor`: the rerun state machine's spiky-loss check (non-fatal)."""

    type: Literal["spiky_loss"]
    planned = in_rank.SpikyLoss
    factor: float = Field(default=1000.0, gt=1)


FAULT_KINDS = (
    RankHung, RankKilled, RandomFault, ExceptionFault, CollectiveHang, FaultDuringCheckpoint, CheckpointCorrupt,
    Sigterm, Sigkill, Sigstop, DutyCycle, SlowRank, NanLoss, SpikyLoss, NodeKilled, NodeHung, NodeRejoin,
    SlurmKillStep, SlurmRequeue, LocalCheckpointLost,
)
"""Every fault kind a scenario may name (in this order in error messages)."""

Fault = Annotated[Union[FAULT_KINDS], Field(discriminator="type")]  # noqa: UP007 - a union of the registry's classes
