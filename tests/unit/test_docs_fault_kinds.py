"""docs/scenarios.md names every fault kind the registry has, and no other: its table of kinds is the
registry's (tools/fault_kinds.py writes it), and the section describes each kind in its prose."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from chaos.faults.registry import FAULT_KINDS
from tools import fault_kinds

ROOT = Path(__file__).resolve().parents[2]


def faults_section() -> str:
    """docs/scenarios.md's "Faults" section, its subsections included, without the generated table."""
    doc = fault_kinds.DOC.read_text()
    section = re.search(r"^## Faults\n(.*?)(?=^## )", doc, re.M | re.S)
    assert section, "docs/scenarios.md has no '## Faults' section"
    text = section.group(1)
    return text[: text.find(fault_kinds.BEGIN)] + text[text.find(fault_kinds.END):]


def test_the_table_of_fault_kinds_is_the_registrys() -> None:
    proc = subprocess.run([sys.executable, "-m", "tools.fault_kinds", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_every_kind_of_the_registry_is_described_in_the_faults_section() -> None:
    prose = faults_section()
    missing = [k for k in map(fault_kinds.kind_name, FAULT_KINDS) if not re.search(rf"(\*\*|`){k}(\*\*|`)", prose)]
    assert not missing, f"docs/scenarios.md, 'Faults': no description of {missing}"


def test_a_table_that_drifted_from_the_registry_is_rewritten() -> None:
    """The doc as it was before the table: three kinds of 29. The check names it; the rewrite lists them all."""
    doc = fault_kinds.DOC.read_text()
    start, end = doc.index(fault_kinds.BEGIN), doc.index(fault_kinds.END)
    stale = doc[:start] + fault_kinds.BEGIN + "\n| `rank_hung` |\n| `rank_killed` |\n| `random` |\n" + doc[end:]
    fixed = fault_kinds.rewritten(stale)
    assert fixed == doc
    assert all(f"| `{fault_kinds.kind_name(k)}` |" in fixed for k in FAULT_KINDS)
