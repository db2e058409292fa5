"""nic_link_down as a scenario writes it and as the runner fires it: refused before launch with a line naming
the field, planned for the runner, its link state files written ACTIVE before a launch and DOWN at its step,
the launcher pointed at them, and skipped with the reason where the launcher has no NIC health check. NVRx's
own check (0.7) reads the link down through the launch's NICs, and through the template alone reads nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from chaos.errors import BadInput
from chaos.faults.nic.planned import ACTIVE, TEMPLATE, NicLinkDown, launch_nics, state_file
from chaos.faults.nic.schema import scenario_problems
from chaos.faults.outside import Armed
from chaos.schema.loader import parse_scenario
from chaos.schema.scenario import plan_faults
from chaos.supervise import deathsig, machine
from chaos.supervise.isolation import Isolation
from chaos.supervise.runner import ft_options, unrunnable
from trainer import nvrx_compat

SCENARIO = Path(__file__).resolve().parents[4] / "scenarios" / "ft_nic_link_down_w1.yaml"


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
    ({"rank": 0}, "s: faults[0]: nic_link_down takes the node's link down, under every rank: leave out rank"),
    ({"nic": 2}, "s: faults[0]: nic: 2 is not one of the 2 NICs listed (0 to 1)"),
    ({"state": "4: ACTIVE"}, "s: faults[0]: state: '4: ACTIVE' is the link up, not down"),
    ({"at_step": None, "after_s": 3}, "s: faults[0]: nic_link_down fires at a step: give at_step (not after_s)"),
])
def test_a_fault_that_takes_nothing_down_is_refused(fault: dict, problem: str) -> None:
    assert _problems(_data(fault=fault)) == [problem]


def test_a_link_the_launcher_cannot_read_is_refused() -> None:
    data = _data(launcher="torchrun", ft={"link_state_path_template": "/x/{nic}"})
    data.pop("ft")
    assert _problems(data) == ["s: faults[0].type: nic_link_down is read by ft_launcher's NIC link state health check (launcher is torchrun)",
                               "s: faults[0].type: nic_link_down needs ft.enable_nic_healthcheck set (true: NVRx 0.7 checks the link "
                               "before each rendezvous; false: nothing reads it)"]
    assert _problems(_data(ft={"enable_nic_healthcheck": True, "link_state_path_template": "/x/{nic}"})) == [
        "s: faults[0].type: nic_link_down points ft.link_state_path_template at the run's link state files: leave it out"]
    assert _problems(_data(nodes=2, world_size=2, faults=[{"type": "nic_link_down", "at_step": 4}] * 2)) == [
        "s: faults[0].type: nic_link_down lists the NICs of a one-node run (nodes: 1)",
        "s: faults[0].type: one nic_link_down per scenario (they share the listed NICs)",
        "s: faults[1].type: nic_link_down lists the NICs of a one-node run (nodes: 1)",
        "s: faults[1].type: one nic_link_down per scenario (they share the listed NICs)",
    ]
    assert scenario_problems("ft_launcher", 1, True, 1, True, None) == [
        "type: nic_link_down lists the NICs in the local launch's mount namespace; a Slurm job's nodes have none"]


def test_the_link_is_up_at_every_launch_until_the_fault_takes_it_down(tmp_path: Path) -> None:
    scenario = parse_scenario(_data(fault={"nics": 3, "nic": 1}), "s")
    (fault, kill) = plan_faults(scenario, 0)
    assert isinstance(fault, NicLinkDown) and (fault.target, fault.at_step, fault.state) == ("launcher", 4, "1: DOWN")
    assert launch_nics([kill], tmp_path) == ()
    assert launch_nics([fault, kill], tmp_path) == ("chaos_ib0", "chaos_ib1", "chaos_ib2")
    assert [state_file(tmp_path, n).read_text() for n in fault.names] == [ACTIVE + "\n"] * 3

    fault.fire(Armed(fault), SimpleNamespace(run_dir=tmp_path), 0.0)  # what the runner's tick does at step 4
    assert [state_file(tmp_path, n).read_text() for n in fault.names] == [ACTIVE + "\n", "1: DOWN\n", ACTIVE + "\n"]
    launch_nics([fault], tmp_path)  # a relaunch of the job finds the link as the run left it
    assert state_file(tmp_path, "chaos_ib1").read_text() == "1: DOWN\n"


def test_the_launcher_reads_the_link_states_of_the_run(tmp_path: Path) -> None:
    options = ft_options(parse_scenario(_data(), "s"), tmp_path)
    assert options["link_state_path_template"] == f"{tmp_path}/nic-link-state/{{nic}}/ports/1/state"
    assert options["enable_nic_healthcheck"] is True
    template = options["link_state_path_template"]
    assert Path(template.format(nic="chaos_ib0")) == state_file(tmp_path, "chaos_ib0")  # as NVRx fills it in


def test_a_machine_or_launcher_without_what_it_needs_skips_it_with_the_reason(monkeypatch) -> None:
    scenario = parse_scenario(_data(), "s")
    if nvrx_compat.launcher_lacks({"enable_nic_healthcheck": True}):
        assert unrunnable(scenario, None) == (
            f"ft_nic_link_down_w1 sets ft.enable_nic_healthcheck, which NVRx {nvrx_compat.VERSION}'s ft_launcher lacks (NVRx 0.7 has it)"
        )
    monkeypatch.setattr(machine, "_no_fake_nics", lambda: "unshare: Operation not permitted")
    assert unrunnable(scenario, None) == (
        "ft_nic_link_down_w1: nic_link_down needs a private mount namespace with its own /sys/class/infiniband: "
        "unshare: Operation not permitted"
    )



def _nvrx_nic_check() -> str | None:
    """Why NVRx's own NIC link state check cannot run here, or None."""
    from chaos.supervise.isolation import unavailable

    if nvrx_compat.launcher_lacks({"enable_nic_healthcheck": True}):
        return f"NVRx {nvrx_compat.VERSION} has no NIC link state health check (0.7 has it)"
    return machine._no_fake_nics() or (f"no namespaces here: {unavailable()}" if unavailable() else None)


CHECK = """
    import sys
    from nvidia_resiliency_ext.shared_utils.health_check import NicLinkStateHealthCheck
    check = NicLinkStateHealthCheck(link_state_path_template=sys.argv[1])  # its baseline, as at the launcher's start
    print(check(), flush=True)
    sys.stdin.readline()  # the fault fires
    print(check(), flush=True)
"""


def _nvrx_checks(run_dir: Path, fault: NicLinkDown, enter: int | None) -> list[str]:
    """NVRx's own check, in a process inside `enter`'s namespaces (None: the machine's), before and after the
    fault fires."""
    argv = deathsig.wrap([sys.executable, "-c", textwrap.dedent(CHECK), str(run_dir / TEMPLATE.removeprefix("{run_dir}/"))], enter=enter)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    before = proc.stdout.readline().strip()
    fault.fire(Armed(fault), SimpleNamespace(run_dir=run_dir), 0.0)
    out, err = proc.communicate("\n", timeout=60)
    assert proc.returncode == 0, err
    return [before, out.strip()]


@pytest.mark.skipif(_nvrx_nic_check() is not None, reason=str(_nvrx_nic_check()))
def test_nvrx_reads_the_link_down_through_the_launchs_nics_and_never_through_the_template_alone(tmp_path: Path) -> None:
    (fault, _) = plan_faults(parse_scenario(_data(), "s"), 0)
    assert isinstance(fault, NicLinkDown)
    room = Isolation(network=False, infiniband=launch_nics([fault], tmp_path)).start(os.environ, "test-nvrx-nic")
    try:
        assert _nvrx_checks(tmp_path, fault, room.holder_pid(None)) == ["True", "False"]
    finally:
        assert room.close() == []
    if not Path("/sys/class/infiniband").exists():  # the finding: on this host the template alone reads nothing
        other = tmp_path / "machine"
        launch_nics([fault], other)
        assert _nvrx_checks(other, fault, None) == ["True", "True"]
