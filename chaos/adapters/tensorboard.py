"""Per-step scalars from TensorBoard event files, as Megatron-LM and Megatron Bridge write them.

Both write ``writer.add_scalar("lm loss", loss, iteration)`` every ``tensorboard_log_interval`` steps
(``training_log``) through ``torch.utils.tensorboard.SummaryWriter``, on the last rank, into
``--tensorboard-dir`` (Bridge: ``logger.tensorboard_dir``); a restarted job adds a new event file to the
same folder.

The reader is the ``tensorboard`` package's own ``EventAccumulator``, the one Megatron-LM's CI compares
its golden values with (``tests/functional_tests/python_test_utils/common.py``): it decodes every
summary encoding and checks each record's CRC, so we read exactly what their comparison reads, and
keep no second implementation of TFRecord and protobuf framing. It is an optional dependency
(``pip install 'chaos-harness[tensorboard]'``, included in ``[test]``), imported only here, when a
TensorBoard source is read.
"""

from __future__ import annotations

from pathlib import Path

from chaos.adapters import lineage

EVENT_FILE_MARK = "tfevents"
"""Event files are named ``events.out.tfevents.<time>.<host>...``."""
INSTALL_HINT = "pip install 'chaos-harness[tensorboard]' (or pip install tensorboard)"


class TensorBoardError(ValueError):
    """A TensorBoard source that cannot be read: no reader installed, no event file, no such scalar."""


def is_event_file(path: Path) -> bool:
    return path.is_file() and EVENT_FILE_MARK in path.name


def event_files(folder: Path) -> list[Path]:
    """The event files directly in ``folder``, oldest name first (the name starts with its creation time)."""
    return sorted(p for p in folder.iterdir() if is_event_file(p))


def read_scalars(source: str | Path, tag: str) -> dict[int, float]:
    """``tag``'s value by step in an event file or a folder of them, the final lineage of restarts."""
    path = Path(source)
    files = [path] if path.is_file() else event_files(path)
    if not files:
        raise TensorBoardError(f"{path}: no TensorBoard event file (events.out.tfevents.*)")
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:
        raise TensorBoardError(f"{path}: reading TensorBoard files needs the tensorboard package: {INSTALL_HINT}") from None
    pairs: list[tuple[int, float]] = []
    tags: set[str] = set()
    for file in files:
        accumulator = event_accumulator.EventAccumulator(str(file), size_guidance={event_accumulator.SCALARS: 0})
        try:
            accumulator.Reload()
        except Exception as e:  # the reader raises its own DataLossError (a TensorFlow stub) and OSErrors
            raise TensorBoardError(f"{file}: unreadable TensorBoard event file ({type(e).__name__}: {e})") from None
        found = accumulator.Tags()["scalars"]
        tags.update(found)
        if tag in found:
            pairs.extend((s.step, s.value) for s in accumulator.Scalars(tag))
    if not pairs:
        known = ", ".join(repr(t) for t in sorted(tags)) or "none"
        raise TensorBoardError(f"{path}: no {tag!r} scalar in its TensorBoard events (scalars: {known})")
    return lineage(pairs)
