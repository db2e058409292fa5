"""The run folder: every file a run leaves, named in one place.

The supervisor creates the folder and writes the inputs (scenario.yaml, plan.json, ft.yaml), every process
appends its events, rank 0 writes the final weights, and the judge writes journal.json and timeline.png.
A folder holds everything needed to judge the run again later (``python -m chaos judge RUN_DIR``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class RunFolderError(ValueError):
    """A run folder, or a file in it, is missing or damaged; the message is one line that names the file
    (and the line, for an event log)."""


@dataclass(frozen=True)
class RunFolder:
    """The paths of one run folder (docs/events.md, "The run folder")."""

    root: Path

    @property
    def events(self) -> Path:
        """One ``<source>.jsonl`` per writer: ``rank-<r>``, ``launcher`` (the runner), ``observed``, ``watch-<node>``."""
        return self.root / "events"

    def event_file(self, source: str) -> Path:
        return self.events / f"{source}.jsonl"

    @property
    def launcher_log(self) -> Path:
        """The launcher's output (stdout and stderr) of a one-node run."""
        return self.root / "launcher.log"

    def agent_log(self, node: str) -> Path:
        """One launcher agent's output in a multi-node run."""
        return self.root / f"launcher-{node}.log"

    @property
    def scenario(self) -> Path:
        """The scenario as run (its seed included): what ``judge`` and ``replay`` read."""
        return self.root / "scenario.yaml"

    @property
    def plan(self) -> Path:
        """The fault plan every rank reads (chaos/faults/plan.py)."""
        return self.root / "plan.json"

    def struck(self, fault_id: str) -> Path:
        """An empty file the supervisor writes once it has struck the planned fault `fault_id`, or given it up:
        our trainer's ranks wait at such a fault's step until it is there (chaos/hooks/injector.py)."""
        return self.root / "struck" / fault_id

    @property
    def ft_config(self) -> Path:
        """ft_launcher's ``--ft-cfg-path`` file: the fault-tolerance options the run used."""
        return self.root / "ft.yaml"

    @property
    def checkpoints(self) -> Path:
        """The trainer's ``checkpoint.save`` folder."""
        return self.root / "checkpoints"

    @property
    def local_checkpoints(self) -> Path:
        """The trainer's ``checkpoint.non_persistent_local_ckpt_dir``: one folder per node inside (NVRx local checkpoints)."""
        return self.root / "local"

    @property
    def final_weights(self) -> Path:
        """Rank 0's model state dict after a completed run (torch.save, written atomically)."""
        return self.root / "final_weights.pt"

    @property
    def final_weights_digest(self) -> Path:
        """The sha256 of the final weights (the ``weights_digest`` of the completed ``exit`` events)."""
        return self.root / "final_weights.sha256"

    def inprocess_monitor_log(self, rank: str, launch_round: int) -> Path:
        """NVRx's in-process monitor process log of one rank and launcher round."""
        return self.root / f"inprocess-monitor-rank-{rank}-round-{launch_round}.log"

    @property
    def journal(self) -> Path:
        return self.root / "journal.json"

    @property
    def picture(self) -> Path:
        return self.root / "timeline.png"
