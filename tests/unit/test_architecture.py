"""The import arrows are the architecture (docs/architecture.md): read from the source, every import counted.

Every module of runlog/, trainer/, chaos/ and benchmarks/ is parsed (ast); every import statement counts,
also those inside functions and under ``if TYPE_CHECKING:``. The graph of imports between the project's
modules must have no circle, and the arrows must point the way the layout says.
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("runlog", "trainer", "chaos", "benchmarks")
MAX_LINES = 410
"""About 400: a module that grows past it is doing more than one job."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


@cache
def imports(module: str) -> frozenset[str]:
    """Every name `module` imports (modules of the project resolved; others as their top-level package)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(_resolve(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], *filter(None, [base])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in MODULES else _resolve(base))
    return frozenset(found - {module})


def _resolve(name: str) -> str:
    while name and name not in MODULES:
        if "." not in name:
            return name  # a third-party or standard-library package
        name = name.rpartition(".")[0]
    return name


def project_imports(module: str) -> set[str]:
    return {m for m in imports(module) if m in MODULES}


def under(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_there_is_no_import_circle() -> None:
    """Tarjan's strongly connected components: any component of more than one module is a circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(project_imports(module)):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while (member := stack.pop()) != module:
                component.append(member)
            if component:
                circles.append(sorted([module, *component]))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(MODULES)))
    for module in sorted(MODULES):
        if module not in index:
            visit(module)
    assert circles == []


FORBIDDEN = [
    ("trainer", ("chaos",), "the system under test never imports the harness: they meet in runlog"),
    ("runlog", ("trainer", "chaos", "benchmarks"), "the contract imports neither side"),
    ("chaos.judge", ("chaos.supervise",), "judging reads a run's files; it never runs anything"),
]


@pytest.mark.parametrize(("source", "targets", "why"), FORBIDDEN, ids=[f[0] for f in FORBIDDEN])
def test_no_arrow_points_the_wrong_way(source: str, targets: tuple[str, ...], why: str) -> None:
    wrong = {m: sorted(t for t in project_imports(m) if under(t, *targets)) for m in MODULES if under(m, source)}
    assert {m: t for m, t in wrong.items() if t} == {}, why


def test_the_contract_needs_the_standard_library_alone() -> None:
    third_party = {m: sorted(i for i in imports(m) if i not in MODULES and i not in sys.stdlib_module_names)
                   for m in MODULES if under(m, "runlog")}
    assert {m: i for m, i in third_party.items() if i} == {}


def test_the_ranks_side_of_the_harness_sees_the_trainer_through_its_components_alone() -> None:
    wrong = {m: sorted(t for t in project_imports(m) if under(t, "trainer") and t != "trainer.components")
             for m in MODULES if under(m, "chaos.hooks")}
    assert {m: t for m, t in wrong.items() if t} == {}


@pytest.mark.parametrize("kinds", ["chaos.hooks.faults", "chaos.supervise.faults", "chaos.schema.plan"])
def test_planned_fault_records_are_leaves_the_ranks_can_read_without_the_schema(kinds: str) -> None:
    """The schema imports the kind classes of both sides; they import only the plan contract, runlog and
    the trainer's component types (and load what they fire with lazily), never the schema or pydantic."""
    allowed = {"chaos.schema.plan", "trainer.components", "chaos.hooks.slow_rank", "chaos.hooks.storage"}
    for module in [kinds, *sorted(m for m in _closure(kinds) if m != kinds)]:
        assert project_imports(module) <= allowed | {m for m in MODULES if under(m, "runlog")}, module
        assert "pydantic" not in imports(module), module


def _closure(module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo.extend(project_imports(current))
    return seen


def test_the_injector_the_ranks_load_reaches_no_schema() -> None:
    reached = _closure("chaos.hooks.injector")
    assert not {m for m in reached if under(m, "chaos.schema") and m != "chaos.schema.plan"}
    assert not any("pydantic" in imports(m) for m in reached)


def test_no_module_is_over_about_400_lines() -> None:
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_graph_is_read_from_every_module() -> None:
    """The test is only as good as its reading: the known arrows are found, TYPE_CHECKING ones included."""
    assert "chaos.schema.plan" in project_imports("chaos.hooks.injector")
    assert "trainer.components" in project_imports("trainer.plugins")  # under `if TYPE_CHECKING:`
    assert "runlog.log" in project_imports("trainer.session")
    assert len(MODULES) > 50


def test_every_writer_logs_typed_records() -> None:
    """EventLog.emit (an event by name, untyped) is for forged test events; the project's writers (a Slurm
    job's steps too) write runlog.records through EventLog.write."""
    untyped = [
        f"{module}:{node.lineno}" for module, path in MODULES.items() if module != "runlog.log"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "emit"
    ]
    assert untyped == []


def test_test_modules_have_unique_basenames() -> None:
    """pytest imports test modules by basename (no packages under tests/): two of one name in one session
    end it in 'import file mismatch' (CI's `pytest tests/unit tests/gpu` did)."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
