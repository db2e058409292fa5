"""The chaos CLI as a user runs it: a wrong expectation fails with both values; bad files launch nothing."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def chaos(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "chaos", *args], cwd=cwd, capture_output=True, text=True, timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "CHAOS_CACHE_DIR": str(ROOT / ".chaos-cache")},
    )


def test_a_wrong_expectation_fails_showing_expected_and_observed(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "scenarios" / "rank_killed.yaml").read_text())
    data["expect"]["resumed_from_step"] = 10  # a checkpoint step, but not the one the run resumes from
    (tmp_path / "rank_killed.yaml").write_text(yaml.safe_dump(data))
    result = chaos("run", str(tmp_path / "rank_killed.yaml"), "--out", str(tmp_path / "runs"), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAIL resumed_from_step: expected == 10, observed 5" in result.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    journal = json.loads((run_dir / "journal.json").read_text())
    assert journal["status"] == "failed"
    assert str(run_dir) in result.stdout


def test_a_malformed_scenario_launches_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: broken\ndescription: x\nworld_size: 2\nfaults:\n  - {type: rank_killed, rank: 5, at_step: 3}\n")
    for args in (("validate", str(bad)), ("run", str(bad), "--out", str(tmp_path / "runs"))):
        result = chaos(*args, cwd=tmp_path)
        assert result.returncode == 2
        assert result.stderr.strip() == f"error: {bad}: faults[0].rank: 5 is outside the world (world_size 2)"
    assert not (tmp_path / "runs").exists()


def test_every_problem_of_a_bad_file_is_one_line_at_once(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "scenarios" / "rank_killed.yaml").read_text())
    data["name"] = "three_broken"
    data["seed"] = "x"  # a field's type
    data["expect"]["restart"] = 1  # an unknown key
    data["faults"][0]["at_step"] = 99  # a cross-field rule: past train.train_iters (12)
    bad = tmp_path / "three_broken.yaml"
    bad.write_text(yaml.safe_dump(data))
    result = chaos("validate", str(bad), str(ROOT / "scenarios" / "rank_killed.yaml"), cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 3, result.stderr
    assert lines[0] == f"error: {bad}: seed: must be an integer, got 'x'"
    assert lines[1].startswith(f"error: {bad}: expect.restart: unknown key; known: exit_code, restarts,")
    assert lines[2] == f"error: {bad}: faults[0].at_step: 99 is past train.train_iters (12)"
    assert result.stdout == f"ok: {ROOT / 'scenarios' / 'rank_killed.yaml'}\n"


def test_a_file_past_the_value_limit_says_whether_its_aliases_or_its_size_did_it(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"  # 10**5 values from nine lines: a list of ten, nested by alias five deep
    bomb.write_text("a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"{b}: &{b} [{', '.join([f'*{a}'] * 10)}]\n" for a, b in zip("abcd", "bcde", strict=True)
    ))
    big = tmp_path / "big.yaml"  # 1 MB written out, no alias at all
    big.write_text("name: big\nvalues: [" + ", ".join(["0"] * 330_000) + "]\n")
    assert 0.9e6 < big.stat().st_size < 1 << 20  # under the byte limit: the value limit is what refuses it
    result = chaos("validate", str(bomb), str(big), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: {bomb}: its aliases expand it past 100000 values, the most a YAML file read here may hold",
        f"error: {big}: it holds more than 100000 values, the most a YAML file read here may hold",
    ]


def test_an_external_command_writes_its_files_in_its_run_folder(tmp_path: Path, checkout_strays) -> None:
    """A command writing to a relative path, run from a folder of the user's: the file lands in the run
    folder the output names; neither that folder, nor the scenario's, nor the checkout gains a file."""
    scenarios, cwd = tmp_path / "scenarios", tmp_path / "cwd"
    scenarios.mkdir()
    cwd.mkdir()
    (scenarios / "writer.py").write_text(
        "import os\nfrom pathlib import Path\n\n"
        "Path(f\"written-by-rank-{os.environ['RANK']}.txt\").write_text(os.getcwd())\n"
    )
    (scenarios / "writes_files.yaml").write_text(
        "name: writes_files\ndescription: a command that writes a file to a relative path\nworld_size: 1\n"
        "launcher: torchrun\ncommand: [python, writer.py]\nexpect: {exit_code: 0}\n"
    )
    result = chaos("run", str(scenarios / "writes_files.yaml"), "--out", str(tmp_path / "runs"), cwd=cwd)
    assert result.returncode == 0, result.stdout + result.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert f"run folder: {run_dir}" in result.stdout
    assert (run_dir / "written-by-rank-0.txt").read_text() == str(run_dir)
    assert list(cwd.iterdir()) == []
    assert sorted(p.name for p in scenarios.iterdir()) == ["writer.py", "writes_files.yaml"]
    assert checkout_strays.added("written-by-rank-") == set()



def columns_line_up(table: str) -> list[list[str]]:
    """The cells of each row of `chaos list`, asserting that each starts where its header does."""
    header, *rows = table.splitlines()
    starts = [header.index(name) for name in ("scenario", "ranks", "launcher", "faults", "description")]
    cells = []
    for row in rows:
        bounds = starts if " INVALID " not in row else starts[:3]
        for at in bounds[1:]:
            assert row[at - 2 : at] == "  " and row[at] != " ", f"a cell off its column at {at}:\n{header}\n{row}"
        cells.append([row[a:b].strip() for a, b in zip(bounds, [*bounds[1:], len(row)], strict=True)])
    return cells


def test_the_catalogue_listing_keeps_its_columns_for_any_name_length(tmp_path: Path) -> None:
    catalogue = chaos("list", cwd=tmp_path)
    assert catalogue.returncode == 0, catalogue.stderr
    rows = columns_line_up(catalogue.stdout)
    assert len(rows) == len(list((ROOT / "scenarios").glob("*.yaml")))
    assert ["rank_killed", "2", "ft_launcher", "rank_killed"] in [row[:4] for row in rows]
    data = yaml.safe_load((ROOT / "scenarios" / "rank_killed.yaml").read_text())
    long_name = "a_scenario_whose_name_is_longer_than_any_column_of_the_catalogue"
    (tmp_path / f"{long_name}.yaml").write_text(yaml.safe_dump({**data, "name": long_name}))
    (tmp_path / "broken.yaml").write_text("name: broken\nworld_size: two\n")
    shutil.copy(ROOT / "scenarios" / "rank_killed.yaml", tmp_path)
    listing = chaos("list", "--scenario-dir", str(tmp_path), cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert columns_line_up(listing.stdout) == [
        [long_name, "2", "ft_launcher", "rank_killed", " ".join(data["description"].split())[:70]],
        ["broken", "INVALID", f"{tmp_path / 'broken.yaml'}: description: required (and 1 more problems)"],
        ["rank_killed", "2", "ft_launcher", "rank_killed", " ".join(data["description"].split())[:70]],
    ]
