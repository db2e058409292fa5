"""Sessions: `nox` (lint + tests), `nox -s unit`, `nox -s functional -- --scenario NAME`, `nox -s lint`, `nox -s bench`,
`nox -s slurm` (the Slurm jobs on a real one-host Slurm; root).

unit, functional, tests, slurm, bench and explore need the same packages (torch, nvidia-resiliency-ext, the
project), so they share one environment, SHARED_ENV, built by the first of them and reused by every later
call. nox makes one per session and cannot share them, so these sessions are `venv_backend="none"` and run
in SHARED_ENV themselves; lint (ruff alone) and gpu (on the machine's CUDA torch) keep nox's own."""

import ctypes.util
import hashlib
import os
import sys
from pathlib import Path

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True

# The CPU wheel on these machines; an unpinned torch pulls several GB of CUDA builds.
CPU_TORCH = "torch==2.13.0"

SHARED_ENV = Path(__file__).resolve().parent / ".nox" / "functional"
"""The one environment of the sessions that run the project: where nox built the main job's environment
(`nox -s functional`) before it was shared, so a checkout that has that 1.2 GB environment keeps it."""

# Pytest plugins the functional and Slurm tests never use, which every pytest process would import first
# (hypothesis: 1.1 s on a 2-core machine; the unit tests keep it).
UNUSED_PLUGINS = ("-p", "no:hypothesispytest")


def install_project(session: nox.Session) -> None:
    """SHARED_ENV, made when missing, with torch and the project (editable) installed once per environment and
    pyproject.toml: pip's check that a reused environment is already satisfied costs 12 s per session, more
    than half the main job; a changed pyproject.toml (a new dependency, an entry point) installs again."""
    python = SHARED_ENV / "bin" / "python"
    if not python.exists():
        session.run_install(sys.executable, "-m", "venv", str(SHARED_ENV))
    install_libfuse(session)
    stamp = SHARED_ENV / "chaos-installed.sha256"
    wanted = hashlib.sha256((CPU_TORCH + Path("pyproject.toml").read_text()).encode()).hexdigest()
    if stamp.is_file() and stamp.read_text() == wanted:
        session.log(f"{CPU_TORCH} and the project are installed in {SHARED_ENV} already (pyproject.toml unchanged)")
        return
    session.run_install(str(python), "-m", "pip", "install", CPU_TORCH)
    session.run_install(str(python), "-m", "pip", "install", "-e", ".[test]")
    stamp.write_text(wanted)


def install_libfuse(session: nox.Session) -> None:
    """libfuse 2, which fusepy loads for storage_stall's FUSE server, from Debian's packages when root and it is
    missing (elsewhere that scenario skips, naming it); a look-up of milliseconds when it is there."""
    if os.geteuid() != 0 or ctypes.util.find_library("fuse") or not Path("/usr/bin/apt-get").exists():
        return
    session.run_install("apt-get", "update", "-qq", external=True)
    session.run_install("apt-get", "install", "-y", "-qq", "libfuse2", external=True, env={"DEBIAN_FRONTEND": "noninteractive"})


def run(session: nox.Session, program: str, *args: str) -> None:
    """`program` of SHARED_ENV, with that environment first on PATH (as nox's own environments are), so the
    processes the tests start (chaos, torchrun, ft_launcher) are its own too."""
    env = {"VIRTUAL_ENV": str(SHARED_ENV), "PATH": f"{SHARED_ENV / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    session.run(str(SHARED_ENV / "bin" / program), *args, env=env)


@nox.session(venv_backend="none")
def unit(session: nox.Session) -> None:
    """Fast CPU tests (gloo process groups in real processes)."""
    install_project(session)
    run(session, "pytest", "tests/unit", "-n", "2", *session.posargs)


@nox.session(venv_backend="none")
def functional(session: nox.Session) -> None:
    """Every scenario as a real multi-process run; `-- --scenario NAME` picks some, `-- -n 2` spreads them."""
    install_project(session)
    run(session, "pytest", "tests/functional", *UNUSED_PLUGINS, "-v", "-rA", "--chaos-out=chaos-runs", *session.posargs)


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """unit, functional, then the Slurm jobs (as `slurm` below): what CI runs. The catalogue runs on two
    workers (0.75x the serial time on two cores): the ranks of our trainer wait at a step-triggered fault
    from outside until it is struck, so a loaded runner no longer fires it late (docs/records/2026-12-02-functional-suite.md). The Slurm tests come last: the functional session has cached the fault-free
    baselines of the catalogue they run."""
    install_project(session)
    run(session, "pytest", "tests/unit", "tests/gpu", "-n", "2")
    run(
        session, "pytest", "tests/functional", *UNUSED_PLUGINS, "-v", "-rA", "--chaos-out=chaos-runs", "-n", "2",
        "--junitxml=chaos-runs/junit.xml", *session.posargs,
    )
    run(session, *SLURM_PYTEST)


@nox.session(venv_backend="none")
def slurm(session: nox.Session) -> None:
    """The generated Slurm jobs through real sbatch/srun/scancel/scontrol on a one-host Slurm (munged, slurmctld,
    three slurmd) that the tests start and stop: needs root, which also installs Debian's packages when missing.
    Without root the tests skip with the reason; CI sets CHAOS_REQUIRE_SLURM=1, which makes that a failure."""
    install_project(session)
    run(session, *SLURM_PYTEST, *session.posargs)


SLURM_PYTEST = ("pytest", "tests/slurm", *UNUSED_PLUGINS, "-v", "-rA", "--chaos-out=chaos-runs", "--junitxml=chaos-runs/junit-slurm.xml")


@nox.session(venv_backend="none")
def bench(session: nox.Session) -> None:
    """Detection, recovery, lost work and overhead side by side; table, JSON and picture in chaos-runs/bench/
    (`-- --quick` a smoke subset, `-- --suite` also times the functional suite, `-- --reps 2` medians)."""
    install_project(session)
    run(session, "python", "-m", "benchmarks", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff>=0.5")
    session.run("ruff", "check", ".")


@nox.session(venv_params=["--system-site-packages"])
def gpu(session: nox.Session) -> None:
    """The GPU suite on the machine's own CUDA torch: every scenario on NCCL, one GPU per rank, the Megatron
    ones where megatron-core / megatron-bridge are installed (each scenario this machine cannot run is
    skipped with its reason), and tests/gpu.

    Logs, journals, pictures, JUnit XML, summary.md and the Megatron correlation land in chaos-runs/gpu/.
    tools/gpu-suite.sh is the one command (machines without nox run it by hand: docs/gpu-results.md);
    `-- -k NAME` passes pytest arguments on.
    """
    session.install("--no-deps", "--no-build-isolation", "-e", ".")
    session.run("bash", "tools/gpu-suite.sh", "chaos-runs/gpu", "--", *session.posargs, external=True)


@nox.session(venv_backend="none")
def explore(session: nox.Session) -> None:
    """`-- BASE.yaml --budget 10m [--seed S] [--out DIR] [--faults a,b]`: chaos explore searches fault schedules from
    a base scenario and shrinks what breaks an invariant to a scenario file (docs/explore.md)."""
    install_project(session)
    run(session, "python", "-m", "chaos", "explore", *session.posargs)
