"""What a failed checkpoint write tells of the storage under it: the OSError at its root (ENOSPC, EIO), or
None when the failure is not the storage's (trainer/checkpoint.py then raises it as the bug it is).

torch.save hides a full disk from its callers: its C++ stream writer raises a RuntimeError with no errno
("PytorchStreamWriter failed writing file", "unexpected pos", "basic_ios::clear: iostream error"), and
DCP gathers such per-rank failures into a CheckpointException. Where the write went, the file system is
asked (statvfs): a stream-writer failure on a file system with no room left is the disk being full.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from torch.distributed.checkpoint.api import CheckpointException

STREAM_WRITE_FAILED = ("PytorchStreamWriter failed writing", "unexpected pos", "basic_ios::clear")
"""What torch's serialization says when the file under it could not be written."""
NO_ROOM_BYTES = 64 * 1024
"""Free space under which a file system counts as full (a failed write leaves its partial file there)."""


def storage_error(e: BaseException, where: Path | None = None) -> OSError | None:
    """The OSError at the root of a failed write to ``where``: itself, one of the per-rank failures DCP
    gathers into a CheckpointException, the cause of either, or torch's stream-writer failure on a file
    system with no room left (then ENOSPC); None when the failure is not the storage's."""
    found = _os_error(e)
    if found is None and where is not None and _stream_write_failed(e) and _no_room(where):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(where))
    return found


def _causes(e: BaseException) -> list[BaseException]:
    """The failure, the per-rank failures a CheckpointException holds, and the causes of each."""
    inner = [exc for exc, _ in e.failures.values()] if isinstance(e, CheckpointException) else []
    cause = e.__cause__ or e.__context__
    return [e, *(c for x in [*inner, *([cause] if cause else [])] for c in _causes(x))]


def _os_error(e: BaseException) -> OSError | None:
    return next((c for c in _causes(e) if isinstance(c, OSError)), None)


def _stream_write_failed(e: BaseException) -> bool:
    return any(isinstance(c, RuntimeError) and any(s in str(c) for s in STREAM_WRITE_FAILED) for c in _causes(e))


def _no_room(where: Path) -> bool:
    path = where
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < NO_ROOM_BYTES
