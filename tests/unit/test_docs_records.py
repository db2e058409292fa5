"""docs/ is written for users: a page of docs/ is reference (what it does, how to run it, today's numbers, what
they mean), and each dated measurement record is a file of docs/records/ named by its date, out of the
reader's path (GUIDE, "Keep docs/ true and written for users")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").glob("*.md"))
RECORDS = sorted((ROOT / "docs" / "records").glob("*"))
_DATED = re.compile(r"^(?:#{1,6} +\**\d{4}-\d{2}-\d{2}|\*\*[^*]{0,80}\d{4}-\d{2}-\d{2})")
"""A heading that begins with a date, or a bold paragraph opener that names one (`**Issue 18, third session
(2026-12-01, ...)**`): the two shapes a dated record took in a page."""
_RECORD_NAME = re.compile(r"\d{4}-\d{2}-\d{2}-[a-z0-9]+(?:-[a-z0-9]+)*\.md")


def dated_sections(text: str) -> list[str]:
    """The lines of a page that open a dated record, outside code blocks."""
    found, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and _DATED.match(line):
            found.append(line)
    return found


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_a_reference_page_holds_no_dated_record(page: Path) -> None:
    found = dated_sections(page.read_text())
    assert not found, f"docs/{page.name}: dated records belong in docs/records/<date>-<topic>.md: {found}"


def test_every_record_is_named_by_its_date_and_has_a_title() -> None:
    assert RECORDS, "docs/records/ is empty"
    wrong = [p.name for p in RECORDS if not _RECORD_NAME.fullmatch(p.name) or not p.read_text().startswith("# ")]
    assert not wrong, f"docs/records/: name a record <date>-<topic>.md and give it a '# ' title: {wrong}"


def test_a_dated_section_is_found() -> None:
    page = (
        "# GPU results\n\n## How to run\n\n```\n## 2026-01-01 in a code block\n```\n## 2026-11-29, run 1: 2x H200\n"
        "Measured on 2026-12-01 ([record](records/x.md)).\n**Issue 18, third session (2026-12-01, 16:40 UTC).** The\n"
    )
    assert dated_sections(page) == ["## 2026-11-29, run 1: 2x H200", "**Issue 18, third session (2026-12-01, 16:40 UTC).** The"]
