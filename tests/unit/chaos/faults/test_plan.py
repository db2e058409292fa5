"""Planning: each kind resolved from the seed into its typed record, written and read back by its side."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.faults.in_rank_kinds import RANK_FAULTS
from chaos.faults.loss.planned import NanLoss
from chaos.faults.nodes.planned import NodeKilled
from chaos.faults.outside_kinds import NODE_FAULTS, SIGNAL_FAULTS, SLURM_FAULTS
from chaos.faults.plan import Side, plan_records, read_plan, write_plan
from chaos.faults.process.planned import RankHung, RankKilled
from chaos.faults.registry import FAULT_KINDS
from chaos.faults.signals.planned import Sigterm
from chaos.schema.scenario import plan_faults

FIRED_BY = {Side.RANK: RANK_FAULTS, Side.RUNNER: SIGNAL_FAULTS, Side.NODE: NODE_FAULTS, Side.SLURM: SLURM_FAULTS}


@pytest.mark.parametrize("kind", FAULT_KINDS, ids=lambda k: k.model_fields["type"].annotation.__args__[0])
def test_every_kind_is_fired_by_the_side_its_planned_class_names(kind) -> None:
    assert kind.planned in FIRED_BY[kind.planned.side]


def test_plan_keeps_signal_targets_and_draws_no_rank_for_them(make_scenario) -> None:
    s = make_scenario(faults=[{"type": "sigterm", "target": "all", "at_step": 3, "grace_s": 4}, {"type": "random", "at_step": 4}])
    plan = plan_faults(s, 7)
    assert isinstance(plan[0], Sigterm)
    assert (plan[0].rank, plan[0].target, plan[0].grace_s, plan[0].params()) == (None, "all", 4.0, {"target": "all", "process_group": False, "grace_s": 4.0})
    alone = plan_faults(make_scenario(faults=[{"type": "random", "at_step": 4}]), 7)[0]
    assert (type(plan[1]), plan[1].rank) == (type(alone), alone.rank)  # a signal fault draws nothing
    assert isinstance(alone, RankKilled | RankHung)


def test_a_node_fault_names_its_node_and_a_persistent_loss_fault_its_faulty_node(make_scenario, monkeypatch) -> None:
    monkeypatch.setenv("CHAOS_NODE_ID", "node-a")
    two_nodes = make_scenario(world_size=2, nodes=2, faults=[{"type": "node_killed", "node": 1, "at_step": 3}])
    (killed,) = plan_faults(two_nodes, 0)
    assert isinstance(killed, NodeKilled) and killed.target_node == "node1"
    losses = make_scenario(faults=[
        {"type": "nan_loss", "rank": 0, "at_step": 3, "persistence": "persistent"},
        {"type": "nan_loss", "rank": 1, "at_step": 4},
    ])
    persistent, transient = plan_faults(losses, 0)
    assert (persistent.faulty_node, transient.faulty_node) == ("node-a", None)
    assert persistent.fires_in(3) and not transient.fires_in(3)


def test_plan_json_is_one_flat_record_per_fault_and_each_side_reads_its_own(make_scenario, tmp_path: Path) -> None:
    s = make_scenario(faults=[
        {"type": "nan_loss", "rank": 1, "at_step": 3},
        {"type": "sigterm", "ranks": [0, 1], "at_step": 5, "grace_s": 2},
    ])
    path = tmp_path / "plan.json"
    write_plan(path, plan_faults(s, 0))
    assert plan_records(path) == [
        {"fault_id": "f0", "type": "nan_loss", "rank": 1, "attempt": 0, "at_step": 3, "delay_s": None,
         "persistence": "transient", "faulty_node": None},
        {"fault_id": "f1", "type": "sigterm", "rank": None, "attempt": 0, "at_step": 5, "delay_s": None,
         "ranks": [0, 1], "target": None, "process_group": False, "grace_s": 2.0},
    ]
    assert read_plan(path, RANK_FAULTS) == [plan_faults(s, 0)[0]]
    (term,) = read_plan(path, SIGNAL_FAULTS)
    assert isinstance(term, Sigterm) and term.ranks == [0, 1]
    assert isinstance(read_plan(path, (NanLoss,))[0], NanLoss)


def test_the_ranks_read_plans_without_the_schema(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = "import sys; sys.modules['pydantic'] = None; import chaos.hooks.injector, chaos.faults.in_rank_kinds"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[4])
