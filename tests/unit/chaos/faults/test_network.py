"""Network faults as a scenario writes them: refused before launch with a line naming the field, planned for
the node supervisor with their node, duration and limits, and a run of them gets a network per node."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from chaos.errors import BadInput
from chaos.faults.network.planned import NetworkDegraded, NetworkPartition
from chaos.schema.loader import parse_scenario
from chaos.schema.scenario import plan_faults
from chaos.supervise.nodes import node_networks
from chaos.supervise.runner import launcher_command

SCENARIOS = Path(__file__).resolve().parents[4] / "scenarios"


def _data(name: str, **fault: object) -> dict:
    data = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
    data["faults"] = [{**data["faults"][0], **fault}]
    return data


def _problems(data: dict) -> list[str]:
    with pytest.raises(BadInput) as e:
        parse_scenario(data, "s")
    return str(e.value).splitlines()


def test_a_partition_of_a_node_the_run_does_not_have_is_refused() -> None:
    assert _problems(_data("network_partition_2x1", node=2)) == ["s: faults[0].node: 2 is not a node of the run (nodes 2)"]


def test_a_partition_that_outlasts_the_deadline_is_refused() -> None:
    assert _problems(_data("network_partition_2x1", duration_s=150)) == [
        "s: faults[0].duration_s: 150 is not shorter than deadline_s (150)"
    ]


def test_a_network_fault_needs_several_nodes_and_a_step() -> None:
    data = {**_data("network_degraded_2x1"), "nodes": 1, "procs_per_node": 2}
    assert "s: faults[0].type: network_degraded cuts a node's link to the others: needs nodes: 2 or more" in _problems(data)
    timed = _data("network_partition_2x1", at_step=None, after_s=3)
    assert any("faults[0]" in p and "at_step" in p for p in _problems(timed)), _problems(timed)


def test_a_degradation_names_its_rate() -> None:
    assert _problems(_data("network_degraded_2x1", rate_kbit=0)) == ["s: faults[0].rate_kbit: must be greater than or equal to 8, got 0"]


def test_network_faults_are_planned_for_their_node_and_give_every_node_a_network(tmp_path: Path) -> None:
    cut = parse_scenario(_data("network_partition_2x1"), "s", stem="network_partition_2x1")
    slow = parse_scenario(_data("network_degraded_2x1"), "s", stem="network_degraded_2x1")
    (p,), (d,) = plan_faults(cut, 0), plan_faults(slow, 0)
    assert isinstance(p, NetworkPartition) and (p.target_node, p.duration_s, p.at_step) == ("node1", 4, 6)
    assert isinstance(d, NetworkDegraded) and (d.rate_kbit, d.queue_ms, d.duration_s) == (16000, 200, 5)
    assert node_networks([p], 3) == ("node0", "node1", "node2")
    assert node_networks([], 2) == ()
    command = launcher_command(cut, tmp_path, 23456, [], host="10.77.0.1")
    assert "--rdzv-endpoint=10.77.0.1:23456" in command
