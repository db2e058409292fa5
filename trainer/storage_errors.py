"""What a failed checkpoint write tells of the storage under it: the OSError at its root (ENOSPC, EIO), or
None when the failure is not the storage's (trainer/checkpoint.py then raises it as the bug it is).

torch.save hides a full disk from its callers: its C++ stream writer raises a RuntimeError with no errno
("unexpected pos 704 vs 598", "PytorchStreamWriter failed writing file", "basic_ios::clear: iostream
error"), and DCP gathers such per-rank failures into a CheckpointException. "unexpected pos" is a short
write, which a regular file gets when its device is full: ENOSPC. For the others the file system the write
went to is asked (statvfs), and one with no room left is the disk being full. (Asking it for a short write
too would race: in an async save a peer may already have removed the failed folder and freed the space.)
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from torch.distributed.checkpoint.api import CheckpointException

SHORT_WRITE = "unexpected pos"
"""What torch's stream writer says when fewer bytes reached the file than it wrote."""
STREAM_WRITE_FAILED = ("PytorchStreamWriter failed writing", "basic_ios::clear")
"""What else torch's serialization says when the file under it could not be written."""
NO_ROOM_BYTES = 64 * 1024
"""Free space under which a file system counts as full (a failed write leaves its partial file there)."""


def storage_error(e: BaseException, where: Path | None = None) -> OSError | None:
    """The OSError at the root of a failed write to ``where``: itself, one of the per-rank failures DCP
    gathers into a CheckpointException, the cause of either, or torch's stream writer's short write, or its
    other write failures on a file system with no room left (then ENOSPC); None when the failure is not the
    storage's."""
    found = _os_error(e)
    if found is None and (_torch_says(e, (SHORT_WRITE,)) or (
        where is not None and _torch_says(e, STREAM_WRITE_FAILED) and _no_room(where)
    )):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), None if where is None else str(where))
    return found


def _causes(e: BaseException) -> list[BaseException]:
    """The failure, the per-rank failures a CheckpointException holds, and the causes of each."""
    inner = [exc for exc, _ in e.failures.values()] if isinstance(e, CheckpointException) else []
    cause = e.__cause__ or e.__context__
    return [e, *(c for x in [*inner, *([cause] if cause else [])] for c in _causes(x))]


def _os_error(e: BaseException) -> OSError | None:
    return next((c for c in _causes(e) if isinstance(c, OSError)), None)


def _torch_says(e: BaseException, texts: tuple[str, ...]) -> bool:
    return any(isinstance(c, RuntimeError) and any(t in str(c) for t in texts) for c in _causes(e))


def _no_room(where: Path) -> bool:
    path = where
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < NO_ROOM_BYTES
