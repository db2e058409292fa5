"""The nox sessions that run the project share one environment: nox itself, run on a copy of the noxfile."""

import ast
import hashlib
import os
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOX = shutil.which("nox")
SHARED = ("unit", "functional", "slurm", "bench", "explore", "tests")
"""The sessions that need torch, NVRx and the project."""

pytestmark = pytest.mark.skipif(NOX is None, reason="nox is not on PATH (python3 -m pip install nox)")


def installed_stamp() -> str:
    """The stamp install_project writes once torch and the project are installed (noxfile.py)."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    (torch,) = (n.value.value for n in tree.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "CPU_TORCH")
    return hashlib.sha256((torch + (ROOT / "pyproject.toml").read_text()).encode()).hexdigest()


def nox(folder: Path, *args: str) -> str:
    env = {**{k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}, "PIP_NO_INDEX": "1"}  # an install fails at once
    result = subprocess.run([NOX, "-f", str(folder / "noxfile.py"), *args], cwd=folder, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The noxfile and pyproject.toml, and a shared environment installed already: a real venv (without pip:
    an install attempted would fail at once) whose pytest prints the environment it ran in."""
    for name in ("noxfile.py", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    env = tmp_path / ".nox" / "functional"
    venv.create(env, with_pip=False, symlinks=True)
    (env / "chaos-installed.sha256").write_text(installed_stamp())
    pytest_ = env / "bin" / "pytest"
    pytest_.write_text('#!/bin/sh\necho "pytest of $VIRTUAL_ENV, PATH ${PATH%%:*}, args: $*"\n')
    pytest_.chmod(0o755)
    return tmp_path


def test_every_project_session_reuses_the_one_environment(checkout: Path) -> None:
    env = checkout / ".nox" / "functional"
    out = nox(checkout, "-s", *SHARED, "--install-only")
    assert out.count(f"the project are installed in {env} already") == len(SHARED), out
    assert "Creating virtual environment" not in out
    assert sorted(p.name for p in (checkout / ".nox").iterdir()) == ["functional"]


def test_a_session_runs_the_shared_environments_programs(checkout: Path) -> None:
    env = checkout / ".nox" / "functional"
    out = nox(checkout, "-s", "unit", "functional", "--", "-k", "marker")
    ran = [line for line in out.splitlines() if line.startswith("pytest of ")]
    assert ran == [
        f"pytest of {env}, PATH {env / 'bin'}, args: tests/unit -n 2 -k marker",
        f"pytest of {env}, PATH {env / 'bin'}, args: tests/functional -p no:hypothesispytest -v -rA "
        "--chaos-out=chaos-runs -k marker",
    ], out
    assert sorted(p.name for p in (checkout / ".nox").iterdir()) == ["functional"]
