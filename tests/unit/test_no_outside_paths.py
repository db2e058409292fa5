"""No file of the project names a path outside the repository: a clone has only the repository, so a doc, a
docstring or a script that cites a file beside the checkout (a workspace's notes, a script of its own) cites
what its reader does not have. What the project relies on lives in it (docs/, tools/).

Caught: a relative path that climbs out of the repository (`../shared/x.sh`, resolved from the file's folder,
from the root, and from a folder the same line `cd`s into), and a path into the workspace the project was
written in (its root folder, or its team's notes and tools folders beside the checkout). Example paths a user would type (`/tmp/out`, `/lustre/me/runs`)
are not files the project relies on. Recorded logs under tests/data quote what other programs printed.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".cfg", ".txt", ".ini", ""}
_CLIMB = re.compile(r"(?<![\w./-])((?:\.\./)+[\w.$-][\w./-]*)")
_WORKSPACE = re.compile(r"(?<![\w.-])(/work/[\w./-]*[\w/]|(?:\.\./)*shared/(?:notes|tools|hooks)/[\w./-]*[\w/])")
_CD = re.compile(r"\bcd ([\w./-]+)")


def tracked_files() -> list[Path]:
    """The files git tracks, and the new ones it does not ignore: what a clone (or the next commit) has."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [ROOT / name for name in out.split("\0") if name]


def exempt(rel: Path) -> bool:
    """A recorded log under tests/data, or this file (its examples)."""
    return rel.parts[:2] == ("tests", "data") and rel.suffix != ".md" or rel == Path(__file__).relative_to(ROOT)


def outside_paths(text: str, rel: Path) -> Iterator[str]:
    """Each path outside the repository that `text`, the file `rel` of the project, names."""
    for number, line in enumerate(text.splitlines(), 1):
        for m in _WORKSPACE.finditer(line):
            yield f"{rel}:{number}: {m.group(1)}: a path into the workspace beside the checkout"
        bases = [(ROOT / rel).parent, ROOT, *(ROOT / d for d in _CD.findall(line))]
        for m in _CLIMB.finditer(line):
            if _WORKSPACE.search(m.group(1)):
                continue
            if not any((base / m.group(1)).resolve().is_relative_to(ROOT) for base in bases):
                yield f"{rel}:{number}: {m.group(1)}: outside the repository"


def test_no_file_of_the_project_names_a_path_outside_it() -> None:
    found = []
    for path in tracked_files():
        rel = path.relative_to(ROOT)
        if path.suffix in TEXT_SUFFIXES and path.is_file() and not exempt(rel):
            try:
                found += outside_paths(path.read_text(), rel)
            except UnicodeDecodeError:
                continue  # not text
    assert not found, "paths outside the repository:\n" + "\n".join(found)


# Built from parts, so that this file, which the check reads too, cites nothing outside the repository.
SIBLING_SCRIPT = "/".join(("..", "shared", "tools", "gpu-wheels.sh"))
WORKSPACE_NOTE = "/" + "/".join(("work", "shared", "notes", "gpu.md"))


def test_a_path_outside_is_reported_with_its_file_and_line() -> None:
    text = (
        f"Add faker with `{SIBLING_SCRIPT}`; see {WORKSPACE_NOTE}.\n"
        "    cd .gpu-stage/repo && bash tools/gpu-suite.sh /tmp/out ../../.whl\n"
        "The driver `../drivers/megatron_lm.py`, the runs under /lustre/me/runs, a sibling `../../other/x.py`.\n"
    )
    assert list(outside_paths(text, Path("docs/x.md"))) == [
        f"docs/x.md:1: {SIBLING_SCRIPT}: a path into the workspace beside the checkout",
        f"docs/x.md:1: {WORKSPACE_NOTE}: a path into the workspace beside the checkout",
        "docs/x.md:3: ../../other/x.py: outside the repository",
    ]
