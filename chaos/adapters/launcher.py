"""What torchrun's and ft_launcher's agents print when they act on a fault, read as runner records.

torchelastic's agent (torchrun, and ft_launcher, which is built on it) logs a worker's death
(``failed (exitcode: C) local_rank: L``) and its restart decision (``Worker group FAILED. k/N attempts left;
will restart``); NVRx's rank monitor logs the heartbeat and section timeouts it acts on; a worker's own line says when
PyTorch's NCCL watchdog timed out a collective. The runner stamps these lines as detection events the moment it
reads them (``follow``: chaos/supervise/launch.py, and a Slurm node's agent wrapper, chaos/supervise/
slurm_agent.py); a foreign trainer's log read afterwards (chaos/adapters/megatron.py) gives the same records.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import IO

from runlog.records import FtTimeout, LauncherLine, NcclWatchdog, Restart, WorkerFailed

LAUNCHER_PATTERNS: list[tuple[type[LauncherLine], re.Pattern[str]]] = [
    (WorkerFailed, re.compile(r"failed \(exitcode: (?P<exitcode>-?\d+)\) local_rank: (?P<local_rank>\d+)")),
    (Restart, re.compile(r"Worker group (?:UNHEALTHY|FAILED)\. (?P<attempts_left>\d+)/\d+ attempts left; will restart")),
    (
        FtTimeout,
        re.compile(r"Did not get (?:initial|subsequent) heartbeat|Section '.+' has been open|Was out of section"),
    ),
    (NcclWatchdog, re.compile(r"Watchdog caught collective operation timeout")),
]
NEXT_ROUND = re.compile(r"attempts to join the next round of the rendezvous|\] Rendezvous'ing worker group")
"""What an agent prints once it has stopped a round's workers and before it starts the next round's: NVRx's
legacy and barrier rendezvous (ft_launcher 0.4 to 0.7) log the first from ``next_rendezvous``, torchrun's agent
the second from ``_rendezvous``; both are called after the stop returned. A restart line comes before the stop,
so a surviving worker's last lines can follow it: output is the next round's only after this line."""


def classify(line: str) -> LauncherLine | None:
    """The runner event a launcher line stands for (with the line's end and its numbers), or None."""
    for kind, pattern in LAUNCHER_PATTERNS:
        m = pattern.search(line)
        if m:
            return kind(line=line[-300:], **{k: int(v) for k, v in m.groupdict().items()})
    return None


def follow(
    stream: Iterable[bytes], copy: IO[bytes], on_record: Callable[[LauncherLine], None],
    on_line: Callable[[str], None] | None = None,
) -> None:
    """Copy a launcher's output to `copy` as it comes (flushed line by line), hand each line `classify` knows
    to `on_record` as its record, then every line to `on_line`; returns at the end of the output."""
    for raw in stream:
        copy.write(raw)
        copy.flush()
        line = raw.decode(errors="replace").rstrip()
        hit = classify(line)
        if hit is not None:
            on_record(hit)
        if on_line is not None:
            on_line(line)
