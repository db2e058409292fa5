"""A scenario's `command`: which arguments are files, how they are resolved against the scenario's folder,
what a command's steps can show, and its own --ft-cfg-path (the CLI on real files: test_boundaries.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.schema import command as cmd
from chaos.schema.loader import parse_scenario
from chaos.schema.scenario import ScenarioError

PATTERN = r"^step (?P<step>\d+) loss (?P<loss>\S+)"


@pytest.mark.parametrize(
    "command, files",
    [
        (["python", "train.py", "--x", "a.yaml"], [1]),
        (["python", "-u", "-X", "dev", "train.py"], [4]),
        (["python", "-m", "pkg.train", "train.py"], []),
        (["python3.11", "-c", "print(1)"], []),
        (["./run.sh", "conf.yaml"], [0]),
        (["torchrun_like", "--ft-cfg-path", "cfg.yaml"], [2]),
        (["python", "t.py", "--ft-cfg-path=cfg.yaml"], [1, 2]),
    ],
)
def test_the_files_of_a_command(command: list[str], files: list[int]) -> None:
    assert cmd.file_args(command) == files


def test_relative_files_are_the_folders_and_must_exist(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    (tmp_path / "cfg.yaml").write_text("fault_tolerance: {}\n")
    resolved = cmd.resolve(["python", "train.py", "--ckpt", "{run_dir}/c.pt", "--ft-cfg-path=cfg.yaml"], tmp_path)
    assert resolved == ["python", str(tmp_path / "train.py"), "--ckpt", "{run_dir}/c.pt", f"--ft-cfg-path={tmp_path / 'cfg.yaml'}"]
    with pytest.raises(ValueError, match=f"no such file {tmp_path / 'gone.py'}"):
        cmd.resolve(["python", "gone.py"], tmp_path)
    with pytest.raises(ValueError, match="no program on PATH"):
        cmd.resolve(["no-such-program-here"], tmp_path)


def test_the_ranks_argv_leaves_out_the_launchers_option() -> None:
    assert cmd.rank_argv(["python", "t.py", "--ft-cfg-path", "c.yaml", "--steps", "3"]) == ["python", "t.py", "--steps", "3"]
    assert cmd.rank_argv(["python", "t.py", "--ft-cfg-path=c.yaml"]) == ["python", "t.py"]
    assert cmd.ft_cfg(["python", "t.py", "--ft-cfg-path", "c.yaml"]) == "c.yaml" and cmd.ft_cfg(["python"]) is None


def _command_scenario(tmp_path: Path, **fields):
    (tmp_path / "train.py").write_text("")
    data = {"name": "c", "description": "d", "world_size": 2, "command": ["python", "train.py"], **fields}
    return parse_scenario(data, "c.yaml", folder=tmp_path)


def test_a_loaded_command_names_its_files_absolutely(tmp_path: Path) -> None:
    assert _command_scenario(tmp_path).command == ["python", str(tmp_path / "train.py")]
    copy = parse_scenario({"name": "c", "description": "d", "world_size": 2, "command": ["python", "gone.py"]}, "copy")
    assert copy.command == ["python", "gone.py"], "a run folder's copy is taken as written"


def test_a_command_may_expect_what_its_steps_show(tmp_path: Path) -> None:
    expect = {"resumed_from_step": 99, "lost_steps": {"min": 3}, "completed_steps": 120}
    assert _command_scenario(tmp_path, step_pattern=PATTERN, expect=expect).expect.resumed_from_step == 99
    with pytest.raises(ScenarioError, match="expect.resumed_from_step: a `command`'s steps are read from its output"):
        _command_scenario(tmp_path, expect={"resumed_from_step": 10})
    with pytest.raises(ScenarioError, match=r"expect.resumed_from_step: 40 is past expect.completed_steps \(30\)"):
        _command_scenario(tmp_path, step_pattern=PATTERN, expect={"resumed_from_step": 40, "completed_steps": 30})
    with pytest.raises(ScenarioError, match=r"expect.lost_steps: min 31 exceeds expect.completed_steps \(30\)"):
        _command_scenario(tmp_path, step_pattern=PATTERN, expect={"lost_steps": {"min": 31}, "completed_steps": 30})


def test_a_commands_own_ft_config_and_the_scenarios_ft(tmp_path: Path) -> None:
    (tmp_path / "cfg.yaml").write_text("fault_tolerance: {rank_heartbeat_timeout: 4}\n")
    own = ["python", "train.py", "--ft-cfg-path", "cfg.yaml"]
    assert _command_scenario(tmp_path, command=own, ft={"term_timeout": 5}).ft.term_timeout == 5
    with pytest.raises(ScenarioError, match="ft.rank_heartbeat_timeout: the command's --ft-cfg-path"):
        _command_scenario(tmp_path, command=own, ft={"rank_heartbeat_timeout": 3})
    with pytest.raises(ScenarioError, match="--ft-cfg-path is ft_launcher's option; this scenario runs torchrun"):
        _command_scenario(tmp_path, command=own, launcher="torchrun")
    (tmp_path / "bad.yaml").write_text("rank_heartbeat_timeout: 4\n")
    with pytest.raises(ScenarioError, match="no `fault_tolerance:` mapping"):
        _command_scenario(tmp_path, command=["python", "train.py", "--ft-cfg-path=bad.yaml"])
