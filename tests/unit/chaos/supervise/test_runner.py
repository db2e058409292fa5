"""The runner's pieces that need no launch: a foreign command's argv."""

from __future__ import annotations

import sys
from pathlib import Path

from chaos.supervise.runner import external_command, unrunnable


def test_external_command_substitutes_interpreter_and_run_dir(tmp_path: Path) -> None:
    argv = external_command(["python", "s.py", "--ckpt", "{run_dir}/c.pt"], tmp_path)
    assert argv[0] == sys.executable
    assert argv[1:] == ["s.py", "--ckpt", f"{tmp_path}/c.pt"]


def test_a_gpu_command_runs_where_the_machine_has_cuda(make_scenario, monkeypatch) -> None:
    """A `command` picks its own device: with nobody choosing one (the CLI, the plugin's second look), a
    `requires: gpu` command is refused only on a machine without CUDA, whatever our trainer's config says."""
    import torch

    command = make_scenario(command=["python", "-c", "pass"], trainer={}, requires="gpu", world_size=1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "needs CUDA GPUs" in unrunnable(command, None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert unrunnable(command, None) is None
    assert "needs CUDA GPUs" in unrunnable(make_scenario(requires="gpu", world_size=1), None), "our trainer: its config's device"
