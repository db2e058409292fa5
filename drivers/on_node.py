"""Run a Python script as if on another node: in a new UTS namespace whose hostname is CHAOS_NODE_ID.

Megatron-Core's rerun state machine names the node a result was computed on by ``os.uname()[1]`` (and the
GPU by ``torch.cuda.current_device()``): exit 16 asks for a resume "on a different node", and only a run
whose hostname differs counts as one. The harness names a run's node by CHAOS_NODE_ID (runlog/env.py), which
a scenario's relaunch sets (``relaunch_env``); this wrapper makes that identity real for a trainer that reads
the hostname: when CHAOS_NODE_ID is set and is not this host's name, it enters a new UTS namespace
(``unshare(CLONE_NEWUTS)``: root, or CAP_SYS_ADMIN), sets the hostname there, and then replaces itself with
the script (same pid, so signals, exit codes and the launcher's view are the script's own). The namespace
holds the hostname only: files, GPUs, network and processes are the machine's.

    python drivers/on_node.py drivers/megatron_lm.py --num-layers 2 ...

SCRIPT is taken from the current folder, or else from the checkout this file is in (a scenario's command
runs in its run folder).
"""

from __future__ import annotations

import ctypes
import os
import socket
import sys
from pathlib import Path

CLONE_NEWUTS = 0x04000000  # <sched.h>
NODE_VAR = "CHAOS_NODE_ID"
CHECKOUT = Path(__file__).resolve().parents[1]


def script_path(path: str) -> str:
    """The script to run: as given when it exists from the current folder (or is absolute), else from the
    checkout this wrapper lives in. A scenario's command runs in its run folder, and names the script as
    the checkout's `drivers/megatron_lm.py`."""
    return path if os.path.isabs(path) or os.path.exists(path) else str(CHECKOUT / path)


def become(name: str) -> None:
    """This process (and what it execs and starts) sees `name` as its hostname."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUTS) != 0:
        reason = os.strerror(ctypes.get_errno())
        sys.exit(f"drivers/on_node.py: cannot run as node {name!r}: unshare(CLONE_NEWUTS) failed ({reason}; needs root)")
    socket.sethostname(name)


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python drivers/on_node.py SCRIPT [ARG ...]")
    name, host = os.environ.get(NODE_VAR), socket.gethostname()
    if name and name != host:
        become(name)
        print(f"drivers/on_node.py: running as node {name} (new UTS namespace; the machine is {host})", flush=True)
    os.execv(sys.executable, [sys.executable, script_path(sys.argv[1]), *sys.argv[2:]])


if __name__ == "__main__":
    main()
