"""Multi-node scenarios: the schema's node rules, each agent's command, and the last round's metrics."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.judge.timeline import compute_metrics
from chaos.schema.loader import parse_scenario
from chaos.schema.scenario import ScenarioError
from chaos.supervise.launch import agent_command, node_block, worker_base
from chaos.supervise.nodes import gpu_blocks, visible_gpus
from trainer import nvrx_compat


def two_nodes(**changes: Any) -> dict[str, Any]:
    data = {
        "name": "n", "description": "two nodes", "world_size": 2, "nodes": 2, "procs_per_node": 1,
        "trainer": {"train.train_iters": 12, "checkpoint.save_interval": 5},
        "faults": [{"type": "node_killed", "node": 1, "at_step": 7}, {"type": "node_rejoin", "node": 1, "attempt": 1, "after_s": 0}],
    }
    return {**data, **changes}


def problem(data: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as e:
        parse_scenario(data, "x.yaml")
    return str(e.value)


def test_a_valid_two_node_scenario_splits_its_world() -> None:
    scenario = parse_scenario(two_nodes(world_size=4, procs_per_node=2), "x.yaml")
    assert (scenario.nodes, scenario.node_size) == (2, 2)
    assert parse_scenario(two_nodes(procs_per_node=None), "x.yaml").node_size == 1


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"world_size": 3}, "world_size: 3 is not nodes (2) x procs_per_node (1)"),
        ({"procs_per_node": None, "world_size": 3}, "world_size: 3 is not nodes (2)"),
        ({"faults": [{"type": "node_killed", "node": 2, "at_step": 7}]}, "faults[0].node: 2 is not a node of the run"),
        ({"faults": [{"type": "node_killed", "node": 0, "at_step": 7}]}, "faults[0].node: must be greater than or equal to 1"),
        ({"faults": [{"type": "node_rejoin", "node": 1, "attempt": 1, "after_s": 0}]}, "node_rejoin replaces a node"),
        ({"faults": [{"type": "node_killed", "node": 1, "at_step": 7}, {"type": "node_rejoin", "node": 1, "at_step": 8, "attempt": 1}]},
         "faults[1]: node_rejoin fires by time"),
        ({"faults": [{"type": "node_hung", "node": 1, "rank": 0, "at_step": 7}]}, "faults[0].rank: a node_hung fault names a node"),
        ({"nodes": 1, "world_size": 1, "procs_per_node": None, "faults": [], "spares": 1}, "spares: hot spares join a multi-node"),
        ({"relaunch": True}, "nodes: a multi-node scenario runs this project's trainer"),
    ],
)
def test_node_rules_are_one_line_errors(changes: dict[str, Any], message: str) -> None:
    assert message in problem(two_nodes(**changes))


def test_node_zero_hosts_the_rendezvous_store_and_no_other_node_does() -> None:
    command = ["python", "-m", "launcher", "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:1", "-m", "trainer"]
    assert agent_command(command, True)[3:5] == ["--rdzv-backend=c10d", "--rdzv-conf=is_host=true"]
    assert agent_command(command, False)[4] == "--rdzv-conf=is_host=false"
    assert agent_command(command, False)[5:] == command[4:]


def start(rank: int, attempt: int, node: str, mono: float, world: int = 2) -> dict[str, Any]:
    return {"event": "run_start", "rank": rank, "attempt": attempt, "node": node, "mono": mono, "world_size": world}


def test_the_last_round_names_its_world_and_nodes() -> None:
    events = [start(0, 0, "node0", 1.0), start(1, 0, "node1", 1.1), start(0, 1, "node0", 5.0), start(1, 1, "node2", 5.1)]
    metrics = compute_metrics(events)
    assert (metrics.world_size_after, metrics.nodes_after) == (2, ["node0", "node2"])


def test_a_shrunken_last_round_shows_its_smaller_world() -> None:
    events = [start(0, 0, "node0", 1.0), start(1, 0, "node1", 1.1), start(0, 1, "node0", 5.0, world=1)]
    metrics = compute_metrics(events)
    assert (metrics.world_size_after, metrics.nodes_after) == (1, ["node0"])


def test_each_simulated_node_gets_its_own_gpus_counted_from_zero():
    assert gpu_blocks(["0", "1"], 1) == ["0", "1"]
    assert gpu_blocks(["4", "5", "6", "7"], 2) == ["4,5", "6,7"]
    assert gpu_blocks(["0", "1", "2"], 2) == ["0,1"]  # a partial block is never handed out


def test_a_spare_beyond_the_gpus_takes_blocks_from_the_last_down():
    assert [node_block(i, 2) for i in range(2)] == [0, 1]
    assert node_block(2, 2) == 1  # the hot spare of node_killed_hot_spare shares node1's GPU, which node1 loses
    assert node_block(3, 2) == 0
    assert node_block(2, 4) == 2


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert visible_gpus() == ["2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus() == []


@pytest.mark.parametrize(("rounds", "launcher", "expected"), [
    (True, nvrx_compat.LAUNCHER_ARGV, 0),  # ft_launcher 0.7: the restart count already is the round joined
    (False, nvrx_compat.LAUNCHER_ARGV, 2),  # 0.4.1: a fresh agent counts its own restarts from 0
    (True, ("-m", "torch.distributed.run"), 2),
])
def test_a_late_agent_numbers_its_workers_from_the_round_it_joins(monkeypatch, rounds, launcher, expected):
    monkeypatch.setattr(nvrx_compat, "RESTART_COUNT_IS_ROUND", rounds)
    assert worker_base(["python", *launcher], 2) == expected
