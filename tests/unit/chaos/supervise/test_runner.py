"""The runner's pieces that need no launch: a foreign command's argv."""

from __future__ import annotations

import sys
from pathlib import Path

from chaos.supervise.runner import external_command


def test_external_command_substitutes_interpreter_and_run_dir(tmp_path: Path) -> None:
    argv = external_command(["python", "s.py", "--ckpt", "{run_dir}/c.pt"], tmp_path)
    assert argv[0] == sys.executable
    assert argv[1:] == ["s.py", "--ckpt", f"{tmp_path}/c.pt"]
