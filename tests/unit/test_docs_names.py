"""Every name README.md and docs/ give a reader exists in the code: a module, a function or class in it, a
class's attribute, a file, a `python -m` module, a `chaos` subcommand, a `nox -s` session.

Names are read from code spans and code blocks (where a reader copies them from), and checked without
importing the project's modules (the files and their syntax trees), except the CLI's parser for its
subcommands. A name that moved fails here with the doc, the line and what is gone.

References to a doc's section, from any file of the project (`docs/X.md ("Section")`, a numbered `§N`, a
Markdown link's `#anchor`), must name a heading that doc has (below).
"""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

from chaos.cli import parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PACKAGES = ("chaos", "trainer", "runlog", "benchmarks", "drivers", "tools", "tests")
FOLDERS = (*PACKAGES, "scenarios", "docs")
NOT_OURS = frozenset({
    "AdamW.step",  # torch.optim
    "DistributedOptimizer.sharded_state_dict",  # megatron-core
    "RankMonitorClient.load_state_dict",  # nvidia-resiliency-ext
    "tests/functional_tests/python_test_utils/common.py",  # Megatron-LM's golden-value checks
    "tests/functional_tests/python_test_utils/test_pretraining_regular_pipeline.py",  # and their tolerances
    "scenarios/x.yaml",  # the example file of docs/scenarios.md's error lines
    "Signals.NAME",  # Python's signal.Signals, as NVRx's log line prints one
})
"""Names the docs quote from other projects, or as an example."""

_MODULE = re.compile(rf"(?<![\w./-])((?:{'|'.join(PACKAGES)})(?:\.[A-Za-z_]\w*)+)(?::([A-Za-z_]\w*))?")
_MEMBER = re.compile(r"(?<![\w./-])([A-Z]\w*[a-z]\w*)\.([A-Za-z_]\w*)")
_PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(FOLDERS)})/[\w./-]*)")
_PYTHON_M = re.compile(r"\bpython3? -m ([\w.]+)")
_CHAOS = re.compile(r"(?<![\w./-])chaos ([a-z][a-z-]*)\b")
_NOX = re.compile(r"\bnox -s ([\w-]+(?: [\w-]+)*)")
_SPAN = re.compile(r"`((?:[^`\n]|\n(?![ \t]*\n))+)`")


@dataclass(frozen=True)
class Snippet:
    """Code as a doc shows it: a code span or a code block's line, and the line it starts on."""

    doc: Path
    line: int
    text: str
    block: bool = False
    """A code block's line (else a code span)."""

    def gone(self, name: str, why: str) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}: `{name}`: {why}"


def snippets(doc: Path) -> Iterator[Snippet]:
    """Each code block line (fenced, or indented four spaces after a blank line) and each code span."""
    lines = doc.read_text().splitlines()
    prose: list[str] = []
    fenced = indented = False
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            prose.append("")
            continue
        indented = line.startswith("    ") and (indented or not prose or not prose[-1].strip() and not fenced)
        if fenced or indented:
            yield Snippet(doc, number, line, block=True)
            prose.append("")
        else:
            prose.append(line)
    text = "\n".join(prose)
    for span in _SPAN.finditer(text):
        yield Snippet(doc, text.count("\n", 0, span.start()) + 1, span.group(1).replace("\n", " "))


@dataclass
class ClassInfo:
    members: set[str] = field(default_factory=set)
    bases: list[str] = field(default_factory=list)


@cache
def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def top_level_names(module: ast.Module) -> set[str]:
    """What a module defines or imports at its top (inside `if` and `try` blocks too)."""
    names: set[str] = set()
    pending: list[ast.stmt] = list(module.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).partition(".")[0] for a in node.names}
        elif isinstance(node, (ast.If, ast.Try)):
            pending += [*node.body, *node.orelse, *getattr(node, "finalbody", []), *getattr(node, "handlers", [])]
        elif isinstance(node, ast.ExceptHandler):
            pending += node.body
    return names


def class_info(node: ast.ClassDef) -> ClassInfo:
    """A class's members: its methods, class-level names, and what its methods assign to `self.`."""
    info = ClassInfo(bases=[ast.unparse(b).rpartition(".")[2] for b in node.bases])
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            info.members.add(item.name)
        elif isinstance(item, ast.Assign):
            info.members |= {t.id for t in item.targets if isinstance(t, ast.Name)}
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            info.members.add(item.target.id)
    for inner in ast.walk(node):
        if isinstance(inner, (ast.Assign, ast.AnnAssign)):
            targets = inner.targets if isinstance(inner, ast.Assign) else [inner.target]
            info.members |= {
                t.attr for t in targets
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
            }
    return info


@cache
def classes() -> dict[str, list[ClassInfo]]:
    """Every class of the project by name (names repeat: any of them may be the one a doc means)."""
    found: dict[str, list[ClassInfo]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(tree(path)):
                if isinstance(node, ast.ClassDef):
                    found.setdefault(node.name, []).append(class_info(node))
    return found


def has_member(cls: str, member: str, seen: frozenset[str] = frozenset()) -> bool:
    """Whether a project class of that name, or a project class it derives from, has `member`."""
    for info in classes().get(cls, []):
        if member in info.members:
            return True
        if any(base not in seen and has_member(base, member, seen | {cls}) for base in info.bases):
            return True
    return False


def module_path(parts: list[str]) -> Path | None:
    """The file (or namespace folder) of a project module."""
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return base if base.is_dir() else None


def check_dotted(dotted: str) -> str | None:
    """Why `chaos.x.y[.attr[.member]]` is gone, or None: the longest module prefix, then a name it defines,
    then (for a class) that class's member."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        path = module_path(parts[:split])
        if path is not None:
            break
    else:
        return f"no module {parts[0]}"
    rest = parts[split:]
    if not rest:
        return None
    if path.is_dir() or rest[0] not in top_level_names(tree(path)):
        return f"module {'.'.join(parts[:split])} has no {rest[0]!r}"
    if len(rest) > 1 and rest[0] in classes() and not has_member(rest[0], rest[1]):
        return f"class {rest[0]} has no {rest[1]!r}"
    return None


def check_member(cls: str, member: str) -> str | None:
    if cls not in classes():
        return f"no class {cls} in the project"
    return None if has_member(cls, member) else f"class {cls} has no {member!r}"


def check_runnable(module: str) -> str | None:
    """Why `python -m module` cannot run, for a project module."""
    path = module_path(module.split("."))
    if path is None:
        return f"no module {module}"
    if path.name == "__init__.py" and not (path.parent / "__main__.py").is_file():
        return f"package {module} has no __main__.py"
    return None if path.suffix == ".py" else f"{module} is a folder without __main__.py"


@cache
def chaos_commands() -> frozenset[str]:
    (sub,) = (a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return frozenset(sub.choices)


@cache
def nox_sessions() -> frozenset[str]:
    """The sessions noxfile.py defines: functions decorated with nox.session (or its `name=`)."""
    names = set()
    for node in tree(ROOT / "noxfile.py").body:
        for deco in getattr(node, "decorator_list", []):
            call = deco if isinstance(deco, ast.Call) else None
            if ast.unparse(call.func if call else deco) == "nox.session":
                named = [k.value.value for k in (call.keywords if call else []) if k.arg == "name"]
                names.add(named[0] if named else node.name)
    return frozenset(names)


def problems(snippet: Snippet) -> Iterator[str]:
    """Every name in a snippet that the code does not have."""
    text = snippet.text
    for m in _MODULE.finditer(text):
        name = m.group(1) + (f".{m.group(2)}" if m.group(2) else "")
        if (why := check_dotted(name)) and m.group(0) not in NOT_OURS:
            yield snippet.gone(m.group(0), why)
    for m in _MEMBER.finditer(text):
        if m.group(0) not in NOT_OURS and (why := check_member(m.group(1), m.group(2))):
            yield snippet.gone(m.group(0), why)
    for m in _PATH.finditer(text):
        path = m.group(1).rstrip(".")
        if path not in NOT_OURS and not (ROOT / path).exists():
            yield snippet.gone(path, "no such file or folder")
    for m in _PYTHON_M.finditer(text):
        if m.group(1).partition(".")[0] in PACKAGES and (why := check_runnable(m.group(1))):
            yield snippet.gone(m.group(0), why)
    for m in _CHAOS.finditer(text):
        if m.group(1) not in chaos_commands():
            yield snippet.gone(m.group(0), f"no such subcommand (chaos has {', '.join(sorted(chaos_commands()))})")
    for m in _NOX.finditer(text):
        for session in m.group(1).split():
            if session.startswith("-"):
                break
            if session not in nox_sessions():
                yield snippet.gone(f"nox -s {session}", f"no such session (noxfile.py has {', '.join(sorted(nox_sessions()))})")


def stale(doc: Path) -> list[str]:
    return [problem for snippet in snippets(doc) for problem in problems(snippet)]


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_name_a_doc_gives_exists(doc: Path) -> None:
    gone = stale(doc)
    assert not gone, "names that are gone:\n" + "\n".join(gone)


def test_a_name_that_is_gone_is_reported_with_its_doc_and_line(tmp_path: Path) -> None:
    doc = tmp_path / "guide.md"
    doc.write_text(
        "Run `python -m chaos list`, then `nox -s functional -- --scenario x`.\n\n"
        "    python -m chaos vanish scenarios/rank_killed.yaml\n\n"
        "The verdicts (`chaos.verdicts.compare_runs`) and `chaos.judge.correlate.correlate`;\n"
        "`Scenario.trainer_config`, `Scenario.runs_alone`, `chaos.judge.correlate:nothing`, `nox -s unit\nexplain`,\n"
        "`chaos/judge/correlate.py`, `trainer/gone.py`, `python -m runlog`.\n"
    )
    assert [p.removeprefix("docs/guide.md:") for p in stale_in(doc)] == [
        "3: `chaos vanish`: no such subcommand (chaos has " + ", ".join(sorted(chaos_commands())) + ")",
        "5: `chaos.verdicts.compare_runs`: module chaos has no 'verdicts'",
        "6: `Scenario.trainer_config`: class Scenario has no 'trainer_config'",
        "6: `chaos.judge.correlate:nothing`: module chaos.judge.correlate has no 'nothing'",
        "6: `nox -s explain`: no such session (noxfile.py has " + ", ".join(sorted(nox_sessions())) + ")",
        "8: `trainer/gone.py`: no such file or folder",
        "8: `python -m runlog`: package runlog has no __main__.py",
    ]


def stale_in(doc: Path) -> list[str]:
    """stale() of a doc outside the checkout, named as if it were in it."""
    inside = ROOT / "docs" / doc.name
    return [problem for s in snippets(doc) for problem in problems(Snippet(inside, s.line, s.text))]


# References to a doc's section: `docs/X.md ("Section")` or `docs/X.md, "Section"` in any file of the project
# (docstrings, comments, docs), `docs/X.md §N` (a numbered section), and Markdown links `[text](X.md#anchor)`.
# Each must name a heading the doc has, as the heading reads (or, for a link, its anchor as GitHub makes it).

TEXT_SUFFIXES = (".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".cfg", ".txt")
NOT_SCANNED = ("tests/data/", "tests/unit/test_docs_names.py")
"""Recorded logs of other programs (they quote what those printed), and this file's broken examples."""
_SECTION_REF = re.compile(r"(?<![\w/.-])(docs/[\w./-]+\.md)(?:,\s*|\s*\(\s*)\"([^\"]{1,160})\"")
_NUMBERED_REF = re.compile(r"(?<![\w/.-])(docs/[\w./-]+\.md) §(\d+)")
_LINK = re.compile(r"\]\(([^()\s]*?\.md)?(?:#([\w-]+))?\)")


def project_files() -> list[Path]:
    """The project's text files: what a clone has (hidden folders, build outputs and run folders aside)."""
    skip = {".git", ".nox", ".venv", "chaos-runs", "build", "__pycache__", ".pytest_cache", ".ruff_cache"}
    found = []
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT)
        if path.suffix not in TEXT_SUFFIXES or not path.is_file() or skip & set(rel.parts) or rel.parts[0].startswith("."):
            continue
        if not str(rel).startswith(NOT_SCANNED) and not rel.parts[0].endswith(".egg-info"):
            found.append(path)
    return found


def _plain(text: str) -> str:
    """A heading or a quoted section name as a reader sees it: backticks gone, one space between words, a line
    broken in a comment (`#`, `//`) or a docstring joined again."""
    return " ".join(re.sub(r"\n\s*(?:#|//)?", " ", text).replace("`", "").split())


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


@cache
def headings(doc: Path) -> tuple[str, ...]:
    """A Markdown file's headings (outside code blocks), as plain text."""
    found, fenced = [], False
    for line in doc.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} +(.+?)\s*#*\s*$", line)):
            found.append(_plain(m.group(1)))
    return tuple(found)


def has_section(doc: Path, section: str) -> bool:
    """Whether a heading of `doc` reads `section`, or begins with it (a word or a parenthesis following): a
    reference names "The run folder" of "The run folder (runlog/layout.py, `RunFolder`)". A numbered heading
    ("8. Headroom under load") is named without its number."""
    for heading in headings(doc):
        heading = re.sub(r"^\d+\. ", "", heading)
        if heading == section or heading.startswith(section) and heading[len(section)] in " :(,":
            return True
    return False


@cache
def anchors(doc: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in headings(doc):
        slug = _slug(heading)
        out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return frozenset(out)


def section_problems(path: Path) -> Iterator[str]:
    """Every reference to a doc's section in `path` that names no section of it."""
    text = path.read_text(errors="replace")
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path

    def line(match: re.Match[str]) -> int:
        return text.count("\n", 0, match.start()) + 1

    for m in _SECTION_REF.finditer(text):
        doc, section = ROOT / m.group(1), _plain(m.group(2))
        if not doc.is_file():
            yield f"{where}:{line(m)}: {m.group(1)}: no such doc"
        elif not has_section(doc, section):
            yield f"{where}:{line(m)}: {m.group(1)} has no section {section!r}"
    for m in _NUMBERED_REF.finditer(text):
        doc = ROOT / m.group(1)
        if not doc.is_file() or not any(h.startswith(f"{m.group(2)}. ") for h in headings(doc)):
            yield f"{where}:{line(m)}: {m.group(1)} has no section {m.group(2)} (§{m.group(2)})"
    if path.suffix != ".md":
        return
    for m in _LINK.finditer(text):
        target = (path.parent / m.group(1)).resolve() if m.group(1) else path
        if m.group(1) and "://" in m.group(1):
            continue
        if not target.is_file():
            yield f"{where}:{line(m)}: ({m.group(1)}): no such file"
        elif m.group(2) and m.group(2) not in anchors(target):
            yield f"{where}:{line(m)}: ({m.group(1) or ''}#{m.group(2)}): {target.name} has no such heading"


def test_every_reference_to_a_doc_section_names_one_it_has() -> None:
    gone = [problem for path in project_files() for problem in section_problems(path)]
    assert not gone, "references to sections that do not exist:\n" + "\n".join(gone)


def test_a_reference_to_a_missing_section_is_reported_with_its_file_and_line(tmp_path: Path) -> None:
    code = tmp_path / "names.py"
    code.write_text(
        '"""Written for a Slurm job (docs/events.md, "A Slurm job\'s events"); read as\n'
        '    docs/events.md ("The run\n    folder") says, and docs/scenarios.md ("Output for robots").\n'
        '# docs/performance.md §99, docs/nothing.md ("Anything")"""\n'
    )
    doc = tmp_path / "page.md"
    doc.write_text("See [the faults](scenarios.md#faults), [gone](scenarios.md#no-such-heading), [x](nope.md).\n")
    (tmp_path / "scenarios.md").write_text("# Scenarios\n\n## Faults\n")
    assert [*section_problems(code), *section_problems(doc)] == [
        f"{code}:1: docs/events.md has no section \"A Slurm job's events\"",
        f"{code}:3: docs/scenarios.md has no section 'Output for robots'",
        f"{code}:4: docs/nothing.md: no such doc",
        f"{code}:4: docs/performance.md has no section 99 (§99)",
        f"{doc}:1: (scenarios.md#no-such-heading): scenarios.md has no such heading",
        f"{doc}:1: (nope.md): no such file",
    ]


# Options the docs give: a `chaos SUB ... --option` line must use an option SUB has (as its parser says), and
# an option shown alone (`--option`) must be one a parser of the project defines, or a known program's.

FOREIGN_OPTIONS = frozenset({
    "--ft-cfg-path", "--max-restarts", "--nnodes", "--nproc-per-node", "--rdzv-backend", "--rdzv-id", "--rdzv-conf",
    "--no-python",  # torchrun / ft_launcher
    "--nodes", "--time", "--requeue", "--open-mode", "--signal", "--no-kill", "--gpus",  # sbatch / srun
    "--calc-ft-timeouts", "--use-distributed-optimizer", "--rerun-mode", "--exit-interval", "--log-interval",
    "--enable-ft-package", "--transformer-impl",  # Megatron-LM
    "--durations", "--dist", "--deselect",  # pytest, pytest-xdist
    "--allow-incomplete-ranks",  # torch's Flight Recorder analyser (fr_trace)
    "--term-timeout",  # NVRx's ft_launcher
    "--ft-",  # ft_launcher's options as a family (`--ft-*`)
})
FOREIGN_PREFIXES = ("--ft-",)
"""ft_launcher's own options, one family: NVRx adds to it with every release (0.7.0 has 70)."""
_OPTION = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")
_CHAOS_LINE = re.compile(r"(?<![\w./-])chaos ([a-z][a-z-]*)\b([^#|;&`]*)")


@cache
def chaos_options(command: str) -> frozenset[str]:
    """The options `chaos COMMAND` takes (its own and chaos's), from the CLI's parser."""
    (sub,) = (a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    own = sub.choices[command]._option_string_actions
    return frozenset(own) | frozenset(parser()._option_string_actions)


@cache
def defined_options() -> frozenset[str]:
    """Every option a parser of the project defines (argparse's add_argument, pytest's addoption)."""
    found = set()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(tree(path)):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("add_argument", "addoption"):
                    found |= {a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")}
    return frozenset(found)


def option_problems(snippet: Snippet) -> Iterator[str]:
    for m in _CHAOS_LINE.finditer(snippet.text):
        if m.group(1) not in chaos_commands():
            continue  # reported as a subcommand that is gone
        for option in _OPTION.findall(m.group(2)):
            if option not in chaos_options(m.group(1)):
                yield snippet.gone(f"chaos {m.group(1)} {option}", f"chaos {m.group(1)} has no such option (see its --help)")
    if snippet.block:
        return  # a block's line of options continues a command line above it
    if (m := _OPTION.match(snippet.text.strip())) and m.group(1) not in defined_options() | FOREIGN_OPTIONS and not m.group(1).startswith(FOREIGN_PREFIXES):
        yield snippet.gone(m.group(1), "no parser of the project defines this option, nor is it a known program's")


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_option_a_doc_gives_exists(doc: Path) -> None:
    gone = [problem for snippet in snippets(doc) for problem in option_problems(snippet)]
    assert not gone, "options that do not exist:\n" + "\n".join(gone)


def test_an_option_that_does_not_exist_is_reported(tmp_path: Path) -> None:
    doc = tmp_path / "correlate.md"
    doc.write_text(
        "    python -m chaos correlate A B --tolerance bf16 --tensorboard-dir runs/tb  # no such option\n\n"
        "A folder of them (`--tensorboard-dir`), or `--steps 3-`; `chaos run x --seed 1 --json`, `--reps 3`.\n"
    )
    found = [p for s in snippets(doc) for p in option_problems(Snippet(ROOT / "docs" / doc.name, s.line, s.text))]
    assert found == [
        "docs/correlate.md:1: `chaos correlate --tensorboard-dir`: chaos correlate has no such option (see its --help)",
        "docs/correlate.md:3: `--tensorboard-dir`: no parser of the project defines this option, nor is it a known program's",
    ]
