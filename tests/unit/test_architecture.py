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


def circles(nodes: list[str], arrows: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components: any component of more than one node is a circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(arrows[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while (member := stack.pop()) != node:
                component.append(member)
            if component:
                found.append(sorted([node, *component]))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(nodes)))
    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return found


def test_there_is_no_import_circle() -> None:
    assert circles(list(MODULES), {m: project_imports(m) for m in MODULES}) == []


def chaos_package(module: str) -> str:
    """The part of the harness a module belongs to: chaos.<package> (chaos.faults.signals.planned: chaos.faults)."""
    return ".".join(module.split(".")[:2])


def test_there_is_no_import_circle_between_the_packages_of_the_harness() -> None:
    """Module by module there is no circle; package by package neither (the schema once named the injector's
    and the supervisor's fault classes, which imported the schema's plan: schema -> hooks -> schema)."""
    harness = [m for m in MODULES if under(m, "chaos")]
    arrows: dict[str, set[str]] = {chaos_package(m): set() for m in harness}
    for module in harness:
        arrows[chaos_package(module)] |= {chaos_package(t) for t in project_imports(module) if under(t, "chaos")}
    assert circles(list(arrows), {p: a - {p} for p, a in arrows.items()}) == []


FORBIDDEN = [
    ("trainer", ("chaos",), "the system under test never imports the harness: they meet in runlog"),
    ("runlog", ("trainer", "chaos", "benchmarks"), "the contract imports neither side"),
    ("chaos.judge", ("chaos.supervise",), "judging reads a run's files; it never runs anything"),
    ("chaos.faults", ("chaos.schema", "chaos.hooks", "chaos.supervise", "chaos.judge", "chaos.adapters"),
     "the faults are the harness's bottom: the schema, the injector and the supervisor call into them"),
]


@pytest.mark.parametrize(("source", "targets", "why"), FORBIDDEN, ids=[f[0] for f in FORBIDDEN])
def test_no_arrow_points_the_wrong_way(source: str, targets: tuple[str, ...], why: str) -> None:
    wrong = {m: sorted(t for t in project_imports(m) if under(t, *targets)) for m in MODULES if under(m, source)}
    assert {m: t for m, t in wrong.items() if t} == {}, why


def test_the_contract_needs_the_standard_library_alone() -> None:
    third_party = {m: sorted(i for i in imports(m) if i not in MODULES and i not in sys.stdlib_module_names)
                   for m in MODULES if under(m, "runlog")}
    assert {m: i for m, i in third_party.items() if i} == {}


def is_schema(module: str) -> bool:
    """A fault family's schema module, or the schema base and registry of chaos/faults: what imports pydantic."""
    return module in ("chaos.faults.spec", "chaos.faults.registry") or (under(module, "chaos.faults") and module.endswith(".schema"))


RANKS_SIDE = {m for m in MODULES if under(m, "chaos.faults") and not is_schema(m)}
"""The plan contract, the bases of the kinds and every family's planned classes and mechanisms."""


def test_the_ranks_side_of_the_harness_sees_the_trainer_through_its_components_alone() -> None:
    wrong = {m: sorted(t for t in project_imports(m) if under(t, "trainer") and t != "trainer.components")
             for m in MODULES if under(m, "chaos.hooks") or m in RANKS_SIDE}
    assert {m: t for m, t in wrong.items() if t} == {}


@pytest.mark.parametrize("module", sorted(RANKS_SIDE))
def test_planned_faults_are_read_without_the_schema(module: str) -> None:
    """What the ranks import of chaos/faults imports only its like, runlog and the trainer's component types
    (and loads what it fires with lazily, torch included), never a schema module or pydantic."""
    allowed = RANKS_SIDE | {"trainer.components"} | {m for m in MODULES if under(m, "runlog")}
    assert project_imports(module) <= allowed
    assert "pydantic" not in imports(module)


def test_every_schema_module_of_a_fault_family_names_planned_classes_of_its_own_family() -> None:
    """A family's schema imports its own planned module (the class it plans), the schema base, runlog and the
    trainer's config types (a kind's rules may read the trainer config, as chaos.schema's do)."""
    for module in (m for m in MODULES if under(m, "chaos.faults") and m.endswith(".schema")):
        family = module.rpartition(".")[0]
        allowed = {f"{family}.planned", "chaos.faults.spec", "chaos.faults.plan", "chaos.strict", "trainer.config"}
        assert project_imports(module) <= allowed | {m for m in MODULES if under(m, "runlog")}, module


def _closure(module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo.extend(project_imports(current))
    return seen


def test_the_injector_the_ranks_load_reaches_no_schema() -> None:
    """The ranks load the injector (an entry point): it reaches the planned faults, runlog and the trainer's
    component types, and no pydantic (docs/performance.md: each rank's imports are its startup)."""
    reached = _closure("chaos.hooks.injector") - {"chaos.hooks.injector"}
    assert {m for m in reached if not (m in RANKS_SIDE or under(m, "runlog") or m == "trainer.components")} == set()
    assert not any("pydantic" in imports(m) for m in reached)


def test_no_module_is_over_about_400_lines() -> None:
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_graph_is_read_from_every_module() -> None:
    """The test is only as good as its reading: the known arrows are found, TYPE_CHECKING ones included."""
    assert "chaos.faults.plan" in project_imports("chaos.hooks.injector")
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
