"""The rerun metrics of chaos.judge.timeline (trainer_exit_codes per launch, rerun_diagnosis) and their verdicts."""

from __future__ import annotations

from typing import Any

from chaos.judge.timeline import compute_metrics
from chaos.judge.verdicts import judge
from chaos.schema.expect import Expect


def ev(name: str, mono: float, rank: int = 0, **fields: Any) -> dict[str, Any]:
    return {"event": name, "rank": rank, "attempt": 0, "mono": mono, **fields}


RELAUNCHED = [
    ev("launch", 0.0, rank=-1),
    ev("rerun", 1.0, diagnosis=None, state="rerunning_in_place"),
    ev("rerun", 1.1, diagnosis="reproducible", code=16),
    ev("exit", 1.2, reason="rerun", code=16),
    ev("exit", 1.2, rank=1, reason="rerun", code=16),
    ev("launcher_exit", 2.0, rank=-1, code=1),
    ev("launch", 3.0, rank=-1),
    ev("rerun", 4.0, diagnosis="persistent_error", code=17),
    ev("rerun", 4.0, rank=1, diagnosis=None, state="stopped"),
    ev("exit", 4.1, reason="rerun", code=17),
    ev("launcher_exit", 5.0, rank=-1, code=1),
]


def test_exit_codes_are_per_launch_and_the_diagnosis_is_the_last_one() -> None:
    m = compute_metrics(RELAUNCHED)
    assert m.trainer_exit_codes == [16, 17]
    assert m.rerun_diagnosis == "persistent_error"
    assert m.exit_code == 1  # the launcher's: torchrun exits 1 whatever its worker gave


def test_a_launch_whose_trainer_wrote_no_exit_shows_none() -> None:
    m = compute_metrics(RELAUNCHED[:6] + [ev("launch", 3.0, rank=-1), ev("launcher_exit", 5.0, rank=-1, code=-9)])
    assert m.trainer_exit_codes == [16, None]
    verdicts = judge(Expect(trainer_exit_codes=[16, 17], rerun_diagnosis="reproducible"), m)
    assert [(v.name, v.passed) for v in verdicts] == [("trainer_exit_codes", False), ("rerun_diagnosis", True)]


def test_a_bare_trainer_run_is_one_launch() -> None:
    assert compute_metrics([ev("exit", 1.0, reason="completed", code=0)]).trainer_exit_codes == [0]
    assert compute_metrics([ev("step", 1.0, iteration=1, loss=1.0)]).rerun_diagnosis is None
