"""The schedule space and the invariants as expectations: every drawn schedule is a valid scenario, the same
seed draws the same schedules, the checkpoint model says what the catalogue's own scenarios measured."""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as seeded

from chaos.explore.invariants import broken, expect_for
from chaos.explore.settings import Draws
from chaos.explore.space import KINDS, Kind, allowed_kinds, fault_registry, space_of
from chaos.schema.loader import load_scenario

ROOT = Path(__file__).resolve().parents[4]
BASES = ["scenarios/rank_killed.yaml", "benchmarks/mutants/bases/mutant_sync.yaml", "benchmarks/mutants/bases/mutant_async.yaml"]
KIND = {k.label: k for k in KINDS}


def space(path: str):
    base = load_scenario(ROOT / path)
    return base, space_of(base, allowed_kinds(base, fault_registry()).kinds)


@pytest.mark.parametrize("path", BASES)
def test_every_drawn_schedule_is_a_valid_scenario(path):
    base, sp = space(path)

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(sp.strategy())
    def check(schedule):
        assert schedule.faults and schedule.faults[0].attempt == 0 and schedule.faults[0].at_step is not None
        strikes = [f for f in schedule.faults if f.kind.kills]
        assert [f.attempt for f in strikes] == list(range(len(strikes)))
        steps = [f.at_step for f in strikes if f.at_step is not None]
        assert steps == sorted(steps)  # each attempt reaches its strike's step
        base.replace(faults=[f.to_yaml() for f in schedule.faults], expect=expect_for(base, sp, schedule))

    check()


def test_the_same_seed_draws_the_same_schedules_in_the_same_order():
    _, sp = space(BASES[0])

    def draws(seed: int) -> list[str]:
        seen: list[str] = []

        @seeded(seed)
        @settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(sp.strategy())
        def collect(schedule):
            seen.append(schedule.key)

        collect()
        return seen

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)


def test_the_checkpoint_model_allows_what_the_catalogue_measured():
    _, sp = space(BASES[0])  # rank_killed: 12 steps, a checkpoint every 5
    killed, in_save = KIND["rank_killed"], KIND["fault_during_checkpoint(save)"]
    assert sp.schedule([(killed, 1, 7)], []).lost_allowed == 1  # rank_killed.yaml: lost_steps <= 2, observed 1
    assert sp.schedule([(in_save, 0, 10)], []).lost_allowed == 5  # fault_during_checkpoint.yaml: 5
    # NVRx's rank monitor wakes a hung rank (SIGCONT) before it kills it: it may compute the step it hung at
    assert sp.schedule([(KIND["rank_hung"], 1, 7)], []).lost_allowed == 2
    assert sp.schedule([(KIND["sigkill"], 1, 7)], []).lost_allowed == 2  # struck after its step, before a save
    corrupted = sp.schedule([(killed, 1, 12)], [(KIND["checkpoint_corrupt(truncate)"], 1)])
    assert corrupted.lost_allowed == 6 and len(corrupted.faults) == 2  # checkpoint_corrupt.yaml: 6


def test_a_load_fault_needs_a_checkpoint_and_a_strike_no_earlier_step():
    _, sp = space(BASES[0])
    killed, load_kill = KIND["rank_killed"], KIND["fault_during_checkpoint(load)"]
    early = sp.schedule([(killed, 0, 3), (load_kill, 0, 1)], [(KIND["checkpoint_corrupt(garble)"], 1)])
    assert [f.kind.label for f in early.faults] == ["rank_killed"]  # nothing saved before step 3: nothing to break
    later = sp.schedule([(killed, 0, 9), (killed, 1, 4)], [])
    assert [f.at_step for f in later.faults] == [9, 9]


def test_async_saves_count_as_sealed_once_the_next_save_began():
    _, sp = space(BASES[2])  # 8 steps, an async save every 3
    killed = KIND["rank_killed"]
    assert sp.schedule([(killed, 0, 5)], []).lost_allowed == 4  # step 3's save may still be in flight
    assert sp.schedule([(killed, 0, 8)], []).lost_allowed == 4  # step 6's began, so step 3's is sealed


def test_more_strikes_than_the_budget_expect_the_launcher_to_give_up():
    base, sp = space(BASES[1])  # max_restarts 2
    killed = KIND["rank_killed"]
    schedule = sp.schedule([(killed, 0, 2), (killed, 0, 4), (killed, 0, 6)], [])
    expect = expect_for(base, sp, schedule)
    assert expect["exit_code"] == 1 and expect["restarts"] == 2 and "baseline" not in expect
    assert expect_for(base, sp, sp.schedule([(killed, 0, 2)], []))["baseline"] == "exact"


def test_kinds_the_base_cannot_reach_are_refused_with_the_reason():
    base = load_scenario(ROOT / "scenarios/rank_killed_torchrun.yaml")
    allowed = allowed_kinds(base, fault_registry())
    refused = {r.label: r.reason for r in allowed.refused}
    assert "rank_hung" in refused and "nothing detects a hang" in refused["rank_hung"]
    assert "local_checkpoint_lost" in refused
    assert not allowed_kinds(base, {}).kinds  # a registry without them: nothing explored


def test_failed_verdicts_map_to_their_invariants():
    journal = {"verdicts": [{"name": n, "passed": p} for n, p in
                            [("baseline", False), ("restarts", False), ("deadline", True), ("unexplained", False)]]}
    assert broken(journal) == ("same_as_baseline", "failures_explained", "unexplained")


def test_a_kind_names_its_own_fields():
    assert Kind("checkpoint_corrupt", "load", kills=False, own=(("mode", "garble"),)).label == "checkpoint_corrupt(garble)"


def test_the_canonical_schedule_kills_rank_0_right_after_the_first_checkpoint():
    _, sp = space(BASES[0])
    assert sp.canonical().key == "rank_killed rank 0 step 6 attempt 0"  # what rank_killed.yaml does (step 7, rank 1)


COMMAND_BASE = {
    "schema_version": 1, "name": "cmd_base", "description": "a foreign trainer", "world_size": 2,
    "launcher": "ft_launcher", "max_restarts": 2, "command": ["python", "train.py"],
    "step_pattern": r"^step (?P<step>\d+)",
}


def command_space(saves: tuple[int, ...], async_save: bool = False):
    from chaos.explore.observe import Observed
    from chaos.schema.loader import parse_scenario

    base = parse_scenario(COMMAND_BASE, "cmd_base")
    observed = Observed(train_iters=20, saves=saves, async_save=async_save, wall_s=5.0, run_dir="r")
    return base, space_of(base, allowed_kinds(base, fault_registry()).kinds, observed)


def test_a_command_is_broken_only_from_outside_at_the_steps_and_saves_its_fault_free_run_showed():
    base, sp = command_space((5, 10, 15, 20))
    assert [k.label for k in sp.kinds] == ["sigkill"] and sp.train_iters == 20 and sp.save_interval == 5
    refused = {r.label: r.reason for r in allowed_kinds(base, fault_registry()).refused}
    assert "rank_killed" in refused and "hooks" in refused["rank_killed"]
    assert sp.steps() == (1, 4, 5, 6, 9, 10, 11, 14, 15, 16, 19, 20)
    _, unknown = command_space(())
    assert unknown.steps() == tuple(range(1, 21)) and unknown.save_interval is None


def test_a_commands_expectations_are_only_what_its_run_shows():
    """No weights to compare and no checkpoint verdicts of ours; lost steps bounded by the interval, since a
    signal from outside lands some time after its step."""
    base, sp = command_space((5, 10, 15, 20))
    expect = expect_for(base, sp, sp.canonical())
    assert expect == {"restarts": 1, "faults_injected": 1, "lost_steps": {"max": 5}, "exit_code": 0, "completed_steps": 20}
    _, in_flight = command_space((5, 10, 15, 20), async_save=True)
    assert expect_for(base, in_flight, in_flight.canonical())["lost_steps"] == {"max": 10}
    _, unknown = command_space(())
    assert "lost_steps" not in expect_for(base, unknown, unknown.canonical())


def test_irregular_saves_are_refused_by_name():
    from chaos.errors import BadInput

    with pytest.raises(BadInput, match=r"saved at steps \[4, 10, 12\]"):
        command_space((4, 10, 12))
    assert command_space((5, 10, 12))[1].save_interval == 5, "a final save off the interval is the run's last"


RETENTION_BASE = "benchmarks/mutants/bases/mutant_retention.yaml"


def test_settings_ranges_put_the_base_value_first_and_schedules_name_only_those_drawn_away():
    search = Draws(*space(RETENTION_BASE))
    assert search.ranges == (("checkpoint.most_recent_k", (-1, 1, 2)), ("checkpoint.async_save", (False, True)),
                             ("dataset.num_workers", (0, 2)))
    assert [c.settings for c in search.canonicals()] == [
        (), (("checkpoint.most_recent_k", 1),), (("checkpoint.most_recent_k", 2),), (("checkpoint.async_save", True),),
        (("dataset.num_workers", 2),)]
    base, sp = search.drawn((("checkpoint.most_recent_k", 1), ("checkpoint.async_save", True)))
    assert (base.config.checkpoint.most_recent_k, base.config.checkpoint.async_save, sp.most_recent_k, sp.async_save) == (1, True, 1, True)
    assert base.explore is not None and search.drawn(())[0] is search.base

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(search.strategy())
    def check(schedule):
        drawn_base, drawn_space = search.drawn(schedule.settings)
        assert all(value != getattr(getattr(search.base.config, k.split(".")[0]), k.split(".")[1]) for k, value in schedule.settings)
        drawn_base.replace(faults=[f.to_yaml() for f in schedule.faults], expect=expect_for(drawn_base, drawn_space, schedule),
                           explore=None)
        assert schedule.size()[1] == len(schedule.settings)

    check()


def test_retention_is_modelled_a_corrupted_one_of_k_leaves_the_others():
    """Saves at 2, 4, 6 of 8; a kill at 7, the newest checkpoint corrupted at the restart's load: with k 1 the
    restart has nothing left (the fault destroyed all k) and may lose 6 steps; with k 2 it falls back to 4."""
    base = load_scenario(ROOT / RETENTION_BASE)
    kill, corrupt = KIND["rank_killed"], KIND["checkpoint_corrupt(truncate)"]
    for k, lost in ((1, 6), (2, 2), (-1, 2)):
        sp = space_of(base.replace(trainer={**base.trainer, "checkpoint.most_recent_k": k}), (kill, corrupt))
        schedule = sp.schedule([(kill, 0, 7)], [(corrupt, 1)])
        assert schedule.lost_allowed == lost, k
        assert expect_for(base, sp, schedule)["stale_resumes"] == {"max": 0}
