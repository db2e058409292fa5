"""Every scenario in the catalogue as a real multi-process run, judged by its own `expect:`.

Select with `--scenario NAME` (repeatable); `nox -s functional -- --scenario rank_killed`.
"""


def test_scenario(scenario_outcome) -> None:
    """A broken run errors at set-up (the scenario_outcome fixture); a resiliency failure fails here."""
    outcome = scenario_outcome
    assert outcome.passed, outcome.summary
    assert (outcome.run_dir / "journal.json").is_file()
    assert (outcome.run_dir / "timeline.png").stat().st_size > 0
