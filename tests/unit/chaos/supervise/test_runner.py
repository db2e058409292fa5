"""The runner's pieces that need no launch: a foreign command's argv."""

from __future__ import annotations

import subprocess
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

    from chaos.supervise import runner

    command = make_scenario(command=["python", "-c", "pass"], trainer={}, requires="gpu", world_size=1)
    monkeypatch.setattr(runner, "cuda_available", lambda: False)
    assert "needs CUDA GPUs" in unrunnable(command, None)
    monkeypatch.setattr(runner, "cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert unrunnable(command, None) is None
    assert "needs CUDA GPUs" in unrunnable(make_scenario(requires="gpu", world_size=1), None), "our trainer: its config's device"


def test_the_runner_reaches_a_launch_without_importing_torch() -> None:
    """Everything the runner reads before launching (the scenario, NVRx's version, whether there is CUDA)
    comes without torch, whose import would delay every `chaos run` by 2 s (docs/records/2026-12-01-functional-suite.md)."""
    code = (
        "import sys, chaos.supervise.runner, chaos.judge.verdicts, chaos.cli; from trainer import config;"
        "config._NVIDIA_DRIVER = (); from chaos.schema.loader import load_scenario;"
        "s = load_scenario('scenarios/rank_killed.yaml'); assert chaos.supervise.runner.unrunnable(s, None) is None;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'nvidia_resiliency_ext')))"
    )
    repo = Path(__file__).resolve().parents[4]
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


def test_no_nvidia_driver_is_no_cuda(monkeypatch, tmp_path: Path) -> None:
    from trainer import config

    monkeypatch.setattr(config, "_NVIDIA_DRIVER", (str(tmp_path / "absent"),))
    assert config.cuda_available() is False
    import torch

    monkeypatch.setattr(config, "_NVIDIA_DRIVER", (str(tmp_path),))
    assert config.cuda_available() is torch.cuda.is_available()
