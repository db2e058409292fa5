"""One home for faults: every kind in a family that says where it acts, how it is undone, what detects it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import chaos.faults
from chaos.faults.in_rank_kinds import RANK_FAULTS
from chaos.faults.outside_kinds import NODE_FAULTS, SIGNAL_FAULTS, SLURM_FAULTS
from chaos.faults.plan import PlannedFault
from chaos.faults.registry import FAULT_KINDS
from chaos.faults.spec import FaultSpec

FAMILIES = sorted(m.name for m in pkgutil.iter_modules(chaos.faults.__path__) if m.ispkg)


def _kinds(module: str, base: type) -> set[type]:
    """The kinds a module defines: its classes of `base` that name their own `type` (not the bases)."""
    mod = importlib.import_module(module)
    return {c for _, c in inspect.getmembers(mod, inspect.isclass) if issubclass(c, base) and c.__module__ == mod.__name__
            and ("type" in vars(c) or "type" in vars(c).get("__annotations__", {}))}


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_declares_where_it_acts_how_it_is_undone_and_what_detects_it(family: str) -> None:
    doc = importlib.import_module(f"chaos.faults.{family}").__doc__ or ""
    assert [key for key in ("Acts:", "Undone:", "Detected by:") if key not in doc] == []


@pytest.mark.parametrize("family", FAMILIES)
def test_every_kind_a_family_defines_is_registered_on_both_sides(family: str) -> None:
    specs = _kinds(f"chaos.faults.{family}.schema", FaultSpec)
    planned = _kinds(f"chaos.faults.{family}.planned", PlannedFault)
    assert specs and planned
    assert specs <= set(FAULT_KINDS)
    assert planned <= {*RANK_FAULTS, *SIGNAL_FAULTS, *NODE_FAULTS, *SLURM_FAULTS}
    assert {s.planned for s in specs} <= planned


def test_every_registered_kind_lives_in_a_family() -> None:
    homes = {k.__module__.rpartition(".")[0] for k in (*FAULT_KINDS, *RANK_FAULTS, *SIGNAL_FAULTS, *NODE_FAULTS, *SLURM_FAULTS)}
    assert homes <= {f"chaos.faults.{f}" for f in FAMILIES}
