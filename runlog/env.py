"""The environment-variable contract between the supervisor and the processes of a run, and attempt numbering.

The supervisor (chaos/supervise) sets these for every process it starts; the trainer reads them. A trainer
started without them (a plain ``python -m trainer``, torchrun by hand) is attempt 0 on its own host.
"""

from __future__ import annotations

import os
import socket

RUN_ID_VAR = "CHAOS_RUN_ID"
"""The run's marker (its run folder's name): every process of the run inherits it, so the supervisor finds
them all in /proc, also those that left the launcher's session, and reaps what is left."""

NODE_VAR = "CHAOS_NODE_ID"
"""The node identity a process writes into its events (``node``): a simulated node's name (node0, node1..),
``node$SLURM_NODEID`` on a cluster, or what a relaunch names (``relaunch_env``). Unset: the hostname."""

ATTEMPT_BASE_VAR = "CHAOS_ATTEMPT_BASE"
"""Restart rounds before this launcher's own: those of earlier launches of the same run folder (a
relaunched job), or the round a late agent (a replacement node, a hot spare) joins."""

STORE_PORT_VAR = "CHAOS_STORE_PORT"
"""A port the supervisor reserved for rank 0's TCPStore. ft_launcher 0.7 does not share its rendezvous
store with workers: it hands them an ephemeral MASTER_PORT that it found free, and with eight runs on one
machine another process took that port before rank 0 bound it (EADDRINUSE, 2 launches in 25)."""

STALLFS_VAR = "CHAOS_STALLFS"
"""``PID:FIFO`` of a run whose checkpoints are served through FUSE (chaos/supervise/stallfs.py): the server a
`storage_stall` fault stops, and the FIFO of the keeper that resumes it."""

MEMORY_CGROUP_VAR = "CHAOS_MEMORY_CGROUP"
"""The run's memory cgroup (chaos/supervise/cgroup.py), which a `host_oom` rank moves itself into."""

RESTART_COUNT_VAR = "TORCHELASTIC_RESTART_COUNT"
"""torchelastic's (torchrun's, ft_launcher's) restart round of the worker group; absent in a plain process."""


def launch_round() -> int:
    """This launcher's restart round (0 for a plain process)."""
    return int(os.environ.get(RESTART_COUNT_VAR, "0"))


def current_attempt() -> int:
    """The restart round: the launcher's restart count (torchrun/ft_launcher set it; 0 for a plain process),
    numbered on from earlier launches of the same run folder, so a relaunched job never reuses an attempt."""
    return int(os.environ.get(ATTEMPT_BASE_VAR, "0")) + launch_round()


def node_id() -> str:
    """The node identity: CHAOS_NODE_ID when the runner sets one (simulated nodes), else the hostname."""
    return os.environ.get(NODE_VAR) or socket.gethostname()


def node_name(index: int) -> str:
    """The identity of a run's node ``index`` (a simulated node's CHAOS_NODE_ID; ``node$SLURM_NODEID`` on Slurm)."""
    return f"node{index}"
