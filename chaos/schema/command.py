"""A scenario's `command`: the files it names, resolved against the scenario file's folder, and the
ft_launcher option it may carry.

A command is the argv of one rank. Its program, when it names a path (it has a ``/``), and the script of a
``python`` command (its first argument that is no option, unless ``-m`` or ``-c`` comes first) are files:
a relative one is the scenario file's folder's, made absolute when the file is loaded, and each must exist,
so ``validate`` refuses what would fail after the launch. A bare program must be on PATH. Other arguments
are passed as written (the command runs in the project root; ``{run_dir}`` is the run folder).

A command that names the run's plan (``{run_dir}/plan.json`` in an argument) is handed the plan: a driver of
ours fires the plan's in-rank faults that have a seam (``FaultSpec.seam``: gpu_oom) through chaos/hooks/seam.py,
so such a scenario may plan them (drivers/megatron_bridge.py takes it as ``--chaos-plan``).

``--ft-cfg-path FILE`` (or ``--ft-cfg-path=FILE``) in a command is ft_launcher's option, not the rank's: the
command brings its own fault-tolerance config, as NVRx's examples are launched. The runner takes it out of
the rank's argv and gives the launcher that file's ``fault_tolerance`` section (chaos/supervise/runner.py).
The file wins: a scenario whose ``ft:`` also sets a detection option is refused, since one of the two
would be silently dropped; ``ft:`` may still set how the launcher runs here (``term_timeout``,
``gpu_memory_reclaim_timeout``).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

FT_CFG = "--ft-cfg-path"
RUN_DIR = "{run_dir}"
PLAN = f"{RUN_DIR}/plan.json"
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
_PYTHON_VALUE_OPTIONS = ("-W", "-X")


def _is_python(program: str) -> bool:
    return bool(_PYTHON.fullmatch(Path(program).name))


def file_args(command: list[str]) -> list[int]:
    """Positions of the arguments that name files: the program (a path), a python command's script, and
    the value of --ft-cfg-path."""
    found = [0] if "/" in command[0] else []
    if _is_python(command[0]):
        args = iter(enumerate(command[1:], 1))
        for i, arg in args:
            if arg in ("-m", "-c"):
                break
            if arg in _PYTHON_VALUE_OPTIONS:
                next(args, None)
            elif not arg.startswith("-"):
                found.append(i)
                break
    at = ft_cfg_at(command)
    return found + ([at] if at is not None else [])


def takes_plan(command: list[str]) -> bool:
    """Whether the command is handed the run's plan (an argument names ``{run_dir}/plan.json``)."""
    return any(PLAN in arg for arg in command)


def rank_fault_problem(kind: str, seam: bool, command: list[str]) -> str | None:
    """Why the command cannot take a fault of `kind` that fires inside a rank (`seam`: it has a step seam)."""
    if not seam:
        return f"{kind} fires inside this project's trainer; a `command` takes signal faults only"
    if not takes_plan(command):
        return f"{kind} fires inside a rank: the `command` must be handed the plan ({PLAN})"
    return None


def ft_cfg_at(command: list[str]) -> int | None:
    """Where the value of the command's --ft-cfg-path is (its own argument, or the one after it)."""
    for i, arg in enumerate(command):
        if arg.startswith(f"{FT_CFG}="):
            return i
        if arg == FT_CFG and i + 1 < len(command):
            return i + 1
    return None


def _value(command: list[str], at: int) -> str:
    return command[at].split("=", 1)[1] if command[at].startswith(f"{FT_CFG}=") else command[at]


def ft_cfg(command: list[str]) -> str | None:
    """The file the command's --ft-cfg-path names, or None."""
    at = ft_cfg_at(command)
    return None if at is None else _value(command, at)


def rank_argv(command: list[str]) -> list[str]:
    """The command as each rank runs it: without its --ft-cfg-path (the launcher's option)."""
    at = ft_cfg_at(command)
    if at is None:
        return list(command)
    first = at if command[at].startswith(f"{FT_CFG}=") else at - 1
    return command[:first] + command[at + 1 :]


def resolve(command: list[str], folder: Path) -> list[str]:
    """`command` with its relative file arguments made absolute against `folder`; raises ValueError naming
    the first file that does not exist (or a bare program not on PATH)."""
    out = list(command)
    if "/" not in out[0] and not _is_python(out[0]) and shutil.which(out[0]) is None:
        raise ValueError(f"{out[0]!r} is no program on PATH")
    for at in file_args(out):
        value = _value(out, at)
        if RUN_DIR in value:
            continue
        path = Path(value) if Path(value).is_absolute() else (folder / value).resolve()
        if not path.is_file():
            raise ValueError(f"no such file {path} (a relative path is the scenario folder's)")
        out[at] = f"{FT_CFG}={path}" if out[at].startswith(f"{FT_CFG}=") else str(path)
    return out


def ft_section(path: str | Path) -> dict[str, Any]:
    """The ``fault_tolerance`` section of an ft_launcher config file; ValueError, one line, when it has none."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ValueError(f"{FT_CFG} {path}: not a readable YAML file ({type(e).__name__})") from None
    section = data.get("fault_tolerance") if isinstance(data, dict) else None
    if not isinstance(section, dict):
        raise ValueError(f"{FT_CFG} {path}: no `fault_tolerance:` mapping (ft_launcher reads that section)")
    return section


def ft_cfg_problems(command: list[str], launcher: str, detection_set: list[str]) -> Iterator[str]:
    """What is wrong with the command's own --ft-cfg-path: it needs ft_launcher, it wins over the scenario's
    `ft:` detection options (`detection_set`: those the scenario sets), and a fixed file must hold a section."""
    own_cfg = ft_cfg(command)
    if own_cfg is None:
        return
    if launcher != "ft_launcher":
        yield f"command: {FT_CFG} is ft_launcher's option; this scenario runs {launcher}"
    if detection_set:
        yield (
            f"ft.{detection_set[0]}: the command's {FT_CFG} ({own_cfg}) is ft_launcher's config; "
            "set it there, or leave out that option"
        )
    if RUN_DIR not in own_cfg and Path(own_cfg).is_absolute():
        try:
            ft_section(own_cfg)
        except ValueError as e:
            yield f"command: {e}"
