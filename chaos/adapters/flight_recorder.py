"""PyTorch's Flight Recorder: armed for a run, and its dumps read through torch's own analyser.

Arming (a scenario's ``flight_recorder: true``) sets torch's own variables for the run's processes: a
trace buffer (``TORCH_FR_BUFFER_SIZE``), the dump path (``TORCH_FR_DUMP_TEMP_FILE``, one file per rank:
``<run>/flight_recorder/rank_<r>``) and the dump on a collective timeout (``TORCH_NCCL_DUMP_ON_TIMEOUT``: NCCL's
watchdog writes it). gloo has no watchdog: our trainer dumps to the same path on the error that ends it
(trainer/flight_recorder.py), so the reader below is the same for both backends.

Reading runs torch's analyser (``torch.distributed.flight_recorder``: ``read_dir`` and ``build_db``, what
``python -m torch.distributed.flight_recorder.fr_trace`` runs) with ``--allow-incomplete-ranks``, since a hung or
killed rank writes no dump, and turns each collective it reports with missing ranks ("Not all ranks joining
collective N ... missing ranks: {r}") into a finding. One repair before it: torch 2.13's gloo process group
records its group in ``pg_config`` with an empty name and description, where the entries name it ``('0',
'default_pg')``; the analyser then fails (KeyError ``('0', 0)``). A dump whose only group is that empty one gets
it named from its entries, as NCCL's dumps name it. torch is imported only here, and only when dumps exist.
"""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUFFER_SIZE = 2000
"""Entries per rank (torch's typical setting): the last collectives of every group."""
PREFIX = "rank_"
"""Dump file names: ``rank_<global rank>`` (torch appends the rank to ``TORCH_FR_DUMP_TEMP_FILE``)."""


def dump_folder(run_dir: Path) -> Path:
    return run_dir / "flight_recorder"


def arming_env(run_dir: Path) -> dict[str, str]:
    """The variables that arm the Flight Recorder for a run's ranks (torch reads them; so does our trainer)."""
    return {
        "TORCH_FR_BUFFER_SIZE": str(BUFFER_SIZE),
        "TORCH_FR_DUMP_TEMP_FILE": str(dump_folder(run_dir) / PREFIX),
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    }


@dataclass(frozen=True)
class Missing:
    """A collective some ranks never joined, as torch's analyser reports it."""

    collective_seq_id: int
    collective: str
    group: str
    missing_ranks: tuple[int, ...]
    dumped_ranks: tuple[int, ...]
    wall: float
    """When the newest dump was written (its file's mtime)."""

    def describe(self) -> str:
        return (f"{self.collective} #{self.collective_seq_id} of group {self.group}: missing ranks "
                f"{list(self.missing_ranks)} (dumps of ranks {list(self.dumped_ranks)})")


@dataclass(frozen=True)
class Analysis:
    missing: tuple[Missing, ...]
    error: str | None = None
    """Why the analyser could not read the dumps (one line), or None."""


def analyse(run_dir: Path) -> Analysis | None:
    """torch's analysis of the run's dumps; None when the run left none."""
    folder = dump_folder(run_dir)
    files = [p for p in folder.glob(f"{PREFIX}*") if p.is_file() and p.name[len(PREFIX):].isdigit()] if folder.is_dir() else []
    if not files:
        return None
    try:
        collectives, details = _run_analyser(folder)
    except Exception as e:  # the analyser asserts and raises anything on dumps it cannot match
        return Analysis((), f"torch's Flight Recorder analyser failed on {folder}: {type(e).__name__}: {e}")
    dumped = tuple(sorted(int(d["rank"]) for d in details.values()))
    wall = max(p.stat().st_mtime for p in files)
    missing = tuple(
        Missing(int(c.collective_seq_id), str(c.collective_name), str(c.pg_desc), tuple(sorted(c.missing_ranks)), dumped, wall)
        for c in collectives if c.missing_ranks
    )
    return Analysis(missing)


def _run_analyser(folder: Path) -> tuple[list[Any], dict[str, dict[str, Any]]]:
    """torch's ``fr_trace`` as a library: its loader and builder, its log lines silenced (the judge reports)."""
    fr_log = logging.getLogger("Flight Recorder")
    was, collecting = fr_log.disabled, gc.isenabled()
    fr_log.disabled = True
    try:
        from torch.distributed.flight_recorder.components.builder import build_db
        from torch.distributed.flight_recorder.components.config_manager import JobConfig
        from torch.distributed.flight_recorder.components.loader import read_dir

        args = JobConfig().parse_args([str(folder), "--prefix", PREFIX, "--allow-incomplete-ranks"])
        details, version = read_dir(args)
        for dump in details.values():
            _name_gloo_group(dump)
        db = build_db(details, args, version)
    finally:
        fr_log.disabled = was
        if collecting:  # torch's read_dir turns the garbage collector off and leaves it off
            gc.enable()
    return list(db.collectives), details


def _name_gloo_group(dump: dict[str, Any]) -> None:
    """Name a gloo dump's one unnamed group after its entries' process group (see the module's docstring)."""
    config = dump.get("pg_config") or {}
    if set(config) != {""}:
        return
    groups = {tuple(e["process_group"]) for e in dump.get("entries", []) if e.get("process_group")}
    ranks = config[""]["ranks"]
    dump["pg_config"] = {name: {"name": name, "desc": desc, "ranks": ranks} for name, desc in groups}
