"""What torchrun's and ft_launcher's agents print when they act on a fault, read as runner records.

torchelastic's agent (torchrun, and ft_launcher, which is built on it) logs a worker's death
(``failed (exitcode: C) local_rank: L``) and its restart decision (``Worker group FAILED. k/N attempts left;
will restart``); NVRx's rank monitor logs the heartbeat and section timeouts it acts on; a worker's own line says when
PyTorch's NCCL watchdog timed out a collective. The runner stamps
these lines as detection events the moment it reads them (chaos/supervise/launch.py); a foreign trainer's
log read afterwards (chaos/adapters/megatron.py) gives the same records.
"""

from __future__ import annotations

import re

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


def classify(line: str) -> LauncherLine | None:
    """The runner event a launcher line stands for (with the line's end and its numbers), or None."""
    for kind, pattern in LAUNCHER_PATTERNS:
        m = pattern.search(line)
        if m:
            return kind(line=line[-300:], **{k: int(v) for k, v in m.groupdict().items()})
    return None
