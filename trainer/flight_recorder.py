"""The Flight Recorder's dump when a collective fails on gloo, where torch dumps nothing of itself.

PyTorch records every collective in a per-rank ring buffer when ``TORCH_FR_BUFFER_SIZE`` is set; NCCL's
watchdog writes it to ``TORCH_FR_DUMP_TEMP_FILE<rank>`` when a collective times out
(``TORCH_NCCL_DUMP_ON_TIMEOUT``). gloo has no watchdog: its timed-out collective raises in the rank. The
session calls ``dump_on_error`` on the error that ends the rank, so a gloo run leaves the same files an NCCL run
does, for torch's analyser (``python -m torch.distributed.flight_recorder.fr_trace``). The environment is the
only seam: whoever launches the trainer arms it, with torch's own variables.
"""

from __future__ import annotations

import os
from pathlib import Path

BUFFER_VAR, DUMP_PATH_VAR = "TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE"


def armed() -> bool:
    """The buffer is on and a dump path is set (torch's default path, /tmp, is nobody's to fill)."""
    size = os.environ.get(BUFFER_VAR, "0").strip()
    return size.isdigit() and int(size) > 0 and bool(os.environ.get(DUMP_PATH_VAR))


def dump_on_error(rank: int) -> Path | None:
    """Write this rank's trace to torch's dump path, unless torch (NCCL's watchdog) or an earlier error of
    this run already did: the first dump is the one closest to the fault. Returns the file written."""
    if not armed():
        return None
    path = Path(f"{os.environ[DUMP_PATH_VAR]}{rank}")
    if path.exists():
        return None
    from torch._C._distributed_c10d import _dump_fr_trace

    trace = _dump_fr_trace()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_bytes(trace)
    os.replace(partial, path)
    return path
