"""`chaos ... | head -1`: a reader that goes away ends no command with an error. Real processes on a real
pipe whose reader is closed before the command writes a byte, so every write meets EPIPE, as the commands'
output after `head` has read its line does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.cli import parser

ROOT = Path(__file__).resolve().parents[3]
SUBCOMMANDS = sorted(next(a for a in parser()._actions if hasattr(a, "choices") and a.choices).choices)


def into_closed_pipe(*argv: str) -> subprocess.CompletedProcess[str]:
    """`python -m chaos ARGV` with stdout and stderr into pipes whose reading ends are closed at once."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    os.close(out_r)
    os.close(err_r)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        proc = subprocess.run([sys.executable, "-m", "chaos", *argv], cwd=ROOT, stdout=out_w, stderr=err_w,
                              env=env, timeout=120)
    finally:
        os.close(out_w)
        os.close(err_w)
    return proc


def with_stderr_kept(*argv: str) -> subprocess.CompletedProcess[str]:
    """stdout into a closed pipe, stderr kept: what the user would see."""
    out_r, out_w = os.pipe()
    os.close(out_r)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        return subprocess.run([sys.executable, "-m", "chaos", *argv], cwd=ROOT, stdout=out_w, stderr=subprocess.PIPE,
                              text=True, env=env, timeout=120)
    finally:
        os.close(out_w)


def test_list_into_a_reader_gone_exits_0_and_says_nothing() -> None:
    proc = with_stderr_kept("list")
    assert (proc.returncode, proc.stderr) == (0, "")


def test_list_into_head_exits_0_in_a_shell_pipeline() -> None:
    """As a user types it, with pipefail: the pipeline's status is chaos's too."""
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", f"{sys.executable} -m chaos list | head -1"], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.split()[:2] == ["scenario", "ranks"]


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_subcommands_help_into_a_reader_gone_exits_0(command: str) -> None:
    proc = with_stderr_kept(command, "--help")
    assert (proc.returncode, proc.stderr) == (0, "")


def test_an_error_line_into_a_reader_gone_keeps_its_exit_code() -> None:
    """Bad input whose error line meets a closed stderr: still exit 2, no traceback anywhere."""
    assert into_closed_pipe("validate", "scenarios/no_such_file.yaml").returncode == 2
    assert into_closed_pipe("list", "--scenario-dir", "no/such/folder").returncode == 2


def test_validate_into_a_reader_gone_keeps_its_exit_code() -> None:
    proc = with_stderr_kept("validate", "scenarios/rank_killed.yaml", "--json")
    assert (proc.returncode, proc.stderr) == (0, "")
