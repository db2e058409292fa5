"""node_unhealthy as a scenario writes it and as the runner plays the node health daemon: refused before launch
with a line naming the field, the launcher pointed at the run's socket, skipped with the reason where the
launcher has no node health check or grpc is missing; NVRx's own client (0.7) reads the service healthy, then
unhealthy once the fault fired, and the stopped service leaves no socket."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from chaos.errors import BadInput
from chaos.faults.node_health.planned import SOCKET, NodeUnhealthy, node_health_endpoint
from chaos.faults.outside import Armed
from chaos.schema.loader import parse_scenario
from chaos.schema.scenario import plan_faults
from chaos.supervise.node_health import NodeHealthService, unavailable
from chaos.supervise.runner import ft_options, unrunnable
from trainer import nvrx_compat

SCENARIO = Path(__file__).resolve().parents[4] / "scenarios" / "ft_node_unhealthy_w1.yaml"


def _data(**changes: object) -> dict:
    data = yaml.safe_load(SCENARIO.read_text())
    fault = {**data["faults"][0], **changes.pop("fault", {})}  # type: ignore[dict-item]
    data["faults"] = [fault, *data["faults"][1:]]
    return {**data, **changes}


def _problems(data: dict) -> list[str]:
    with pytest.raises(BadInput) as e:
        parse_scenario(data, "s")
    return str(e.value).splitlines()


@pytest.mark.parametrize(("fault", "problem"), [
    ({"rank": 0}, "s: faults[0]: node_unhealthy makes the node unhealthy, under every rank: leave out rank"),
    ({"at_step": None, "after_s": 3}, "s: faults[0]: node_unhealthy fires at a step: give at_step (not after_s)"),
])
def test_a_bad_fault_is_refused_naming_it(fault: dict, problem: str) -> None:
    assert problem in _problems(_data(fault=fault))


def test_a_scenario_it_cannot_act_in_is_refused_with_every_reason() -> None:
    assert _problems(_data(launcher="torchrun")) == [
        "s: faults[0].type: node_unhealthy is asked by ft_launcher's node health check (launcher is torchrun)"]
    assert _problems(_data(nodes=2, world_size=2, faults=[{"type": "node_unhealthy", "at_step": 4}] * 2)) == [
        "s: faults[0].type: node_unhealthy plays the node health service of a one-node run (nodes: 1)",
        "s: faults[0].type: one node_unhealthy per scenario (they share the run's node health service)",
        "s: faults[1].type: node_unhealthy plays the node health service of a one-node run (nodes: 1)",
        "s: faults[1].type: one node_unhealthy per scenario (they share the run's node health service)",
    ]


def test_the_launcher_is_pointed_at_the_runs_socket(tmp_path: Path) -> None:
    scenario = parse_scenario(_data(), "s")
    fault, kill = plan_faults(scenario, 0)
    assert isinstance(fault, NodeUnhealthy) and (fault.target, fault.at_step, fault.check) == ("launcher", 4, "chaos_node_unhealthy")
    assert node_health_endpoint([kill], tmp_path) is None
    assert node_health_endpoint([fault, kill], tmp_path) == tmp_path / SOCKET
    options = ft_options(scenario, tmp_path)
    assert f"--ft-node-health-check-endpoint={tmp_path / SOCKET}" in nvrx_compat.launcher_cli_options(options)
    assert "node_health_check_endpoint" not in nvrx_compat.ft_config_section(options)  # the command line's alone


def test_a_machine_or_launcher_without_what_it_needs_skips_it_with_the_reason(monkeypatch) -> None:
    scenario = parse_scenario(_data(), "s")
    if nvrx_compat.launcher_lacks({"node_health_check_endpoint": "x"}):
        assert unrunnable(scenario, None) == (
            f"ft_node_unhealthy_w1: node_unhealthy points ft_launcher's --ft-node-health-check-endpoint at the run's "
            f"node health service, which NVRx {nvrx_compat.VERSION}'s ft_launcher lacks (NVRx 0.7 has it)")
    monkeypatch.setattr(nvrx_compat, "launcher_lacks", lambda options: [])

    def no_grpc() -> SimpleNamespace:
        raise ModuleNotFoundError("No module named 'grpc'", name="grpc")

    monkeypatch.setattr(nvrx_compat, "node_health_stubs", no_grpc)
    assert unrunnable(scenario, None) == (
        "ft_node_unhealthy_w1: node_unhealthy serves NVRx's nvhcd gRPC service: No module named 'grpc' (pip install grpcio)")


@pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))
def test_nvrx_reads_the_node_healthy_then_unhealthy_and_the_stopped_service_leaves_no_socket(tmp_path: Path) -> None:
    from nvidia_resiliency_ext.shared_utils.health_check import NodeHealthCheck

    (fault, _) = plan_faults(parse_scenario(_data(), "s"), 0)
    assert isinstance(fault, NodeUnhealthy)
    socket = tmp_path / SOCKET
    service = NodeHealthService(tmp_path, socket)
    try:
        check = NodeHealthCheck(endpoint=str(socket), request_timeout_sec=10)  # as the launcher makes it at its start
        assert check() is True
        fault.fire(Armed(fault), SimpleNamespace(run_dir=tmp_path), 0.0)
        assert check() is False
    finally:
        service.stop()
    assert not socket.exists()
    answers = [json.loads(line) for line in (tmp_path / "node-health" / "answers.log").read_text().splitlines()]
    assert [json.loads(a["output"]) for a in answers] == [
        {"fail_count": 0, "failed_checks": []}, {"fail_count": 1, "failed_checks": ["chaos_node_unhealthy"]}]
    assert NodeHealthCheck(endpoint=str(socket))() is True  # no service: NVRx skips the check (a missing nvhcd is no failure)


def test_a_socket_path_too_long_for_a_unix_socket_is_refused_naming_it(tmp_path: Path) -> None:
    socket = tmp_path / ("x" * 120) / SOCKET
    with pytest.raises(BadInput, match="longer than a Unix socket path may be"):
        NodeHealthService(tmp_path, socket)


@pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))
def test_the_service_serves_while_the_launch_runs_and_is_stopped_whatever_its_end(tmp_path: Path, monkeypatch) -> None:
    """The runner's launch starts the service before anything else of the launch and stops it in its
    ``finally``: a launch that fails leaves no socket and no server."""
    from chaos.supervise import runner

    scenario = parse_scenario(_data(), "s")
    plan = plan_faults(scenario, 0)
    socket = tmp_path / SOCKET
    served: list[bool] = []

    def broken_launch(plan: object, run_dir: Path) -> None:
        from nvidia_resiliency_ext.shared_utils.health_check import NodeHealthCheck

        served.append(NodeHealthCheck(endpoint=str(socket), request_timeout_sec=10)())
        raise OSError("the launch failed")

    monkeypatch.setattr(runner.RunStorage, "of", broken_launch)
    with pytest.raises(OSError, match="the launch failed"):
        runner._launch(scenario, tmp_path, [], plan, None, None, lambda: None, None, {}, 10.0, {})  # type: ignore[arg-type]
    assert served == [True]
    assert not socket.exists()
    assert len((tmp_path / "node-health" / "answers.log").read_text().splitlines()) == 1
