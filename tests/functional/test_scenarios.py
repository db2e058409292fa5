"""Every scenario in the catalogue as a real multi-process run, judged by its own `expect:`.

Select with `--scenario NAME` (repeatable); `nox -s functional -- --scenario rank_killed`.
"""

from pathlib import Path


def test_scenario(scenario_file: Path, run_scenario) -> None:
    outcome = run_scenario(scenario_file)
    assert outcome.passed, outcome.summary
    assert (outcome.run_dir / "journal.json").is_file()
    assert (outcome.run_dir / "timeline.png").stat().st_size > 0
