"""The profile file: the shipped one loads, a hand-written one round-trips, a bad one is one line naming what."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.forecast.forecast import Job, run_forecast
from chaos.forecast.presets import LLAMA3_CAUSES, mtbf_per_gpu, preset
from chaos.forecast.profile import CLASSES, ProfileError, load_profile, require_classes, save_profile

SHIPPED = Path(__file__).resolve().parents[4] / "chaos" / "forecast" / "profiles" / "megatron.yaml"


def test_the_shipped_megatron_profile_prices_every_class() -> None:
    profile = load_profile(SHIPPED)
    assert set(profile.classes) == set(CLASSES)
    assert profile.classes["process_death"].detect_s < profile.classes["hang"].detect_s
    assert not profile.classes["preemption"].loses_progress


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_a_profile_reads_back_as_written(tmp_path: Path, suffix: str) -> None:
    profile = load_profile(SHIPPED)
    path = tmp_path / f"p{suffix}"
    save_profile(profile, path)
    assert load_profile(path) == profile


@pytest.mark.parametrize(("text", "problem"), [
    ("[1, 2]", "not a profile"),
    ("source: x\nstep_time_s: 1\nstartup_s: 1\nsave: {interval_steps: 5, stall_s: 1}\nclasses: {}\ncolour: red\n", "unknown key"),
    ("source: x\nstep_time_s: -1\nstartup_s: 1\nsave: {interval_steps: 5, stall_s: 1}\nclasses: {}\n", "step_time_s"),
    ("source: x\nstep_time_s: 1\nstartup_s: 1\nsave: {interval_steps: 5, stall_s: 1}\n"
     "classes: {meteor: {detect_s: 1, restart_s: 1, load_s: 1}}\n", "classes.meteor"),
    ("source: x\nstep_time_s: 1\nstartup_s: 1\nsave: {interval_steps: 0, stall_s: 1}\nclasses: {}\n", "save.interval_steps"),
])
def test_a_bad_profile_is_refused_naming_the_file_and_field(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError) as e:
        load_profile(path)
    assert all(line.startswith(f"{path}: ") for line in e.value.problems)
    assert problem in "\n".join(e.value.problems)


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot read"):
        load_profile(tmp_path / "none.yaml")


def test_a_profile_lacking_a_class_a_preset_needs_names_it_and_its_scenario() -> None:
    profile = load_profile(SHIPPED)
    partial = profile.model_copy(update={"classes": {"process_death": profile.classes["process_death"]}})
    with pytest.raises(ProfileError) as e:
        require_classes(partial, preset("llama3-16k").classes(), "preset llama3-16k")
    (line,) = e.value.problems
    assert "'hang' (measured by scenarios/rank_hung.yaml)" in line and "preset llama3-16k" in line
    require_classes(partial, mtbf_per_gpu(1000).classes(), "--mtbf-gpu-hours 1000")  # a plain MTBF: crashes only


def test_the_llama3_preset_is_meta_s_419_interruptions_in_54_days() -> None:
    assert sum(count for count, _, _ in LLAMA3_CAUSES.values()) == 419
    rates = preset("llama3-16k").job_rates(16_384, 2048)
    assert sum(rates.values()) * 54 * 86400 == pytest.approx(419)


def test_a_forecast_with_the_shipped_profile_and_llama3() -> None:
    f = run_forecast(load_profile(SHIPPED), preset("llama3-16k"), Job(16_384, days=54, replicas=100))
    band = f.outcome.band()
    assert 0 < band["p10"] <= band["mean"] <= band["p90"] < 1
    assert f.outcome.failures.mean() == pytest.approx(419, rel=0.05)
    assert max(g for _, g in f.curve) == dict(f.curve)[f.best_interval]
