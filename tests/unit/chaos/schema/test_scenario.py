"""The scenario schema: each rule is one error line naming the file and the field; nothing else escapes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos.schema.loader import load_scenario, parse_scenario, scenario_files
from chaos.schema.scenario import Scenario, ScenarioError
from trainer.config_loader import load_config, parse_override

SCENARIOS = Path(__file__).resolve().parents[4] / "scenarios"
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def valid() -> dict[str, Any]:
    """A scenario that uses every section; a test breaks one thing in a fresh copy."""
    return {
        "schema_version": 1,
        "name": "sample",
        "description": "every section in use",
        "world_size": 2,
        "launcher": "ft_launcher",
        "recipe": "tiny_cpu",
        "trainer": {"train.train_iters": 12, "checkpoint.save_interval": 5, "optimizer.min_lr": 1.0e-5},
        "ft": {"rank_heartbeat_timeout": 5.0, "rank_section_timeouts": {"setup": 30, "step": 5.5}},
        "max_restarts": 2,
        "deadline_s": 60,
        "seed": 3,
        "faults": [
            {"type": "rank_killed", "rank": 1, "at_step": 7},
            {"type": "rank_hung", "rank": 0, "after_s": 2.5, "attempt": 1},
            {"type": "random", "at_step": 3},
        ],
        "expect": {
            "exit_code": 0,
            "restarts": {"min": 1, "max": 2},
            "resumed_from_step": 5,
            "completed_steps": 12,
            "lost_steps": {"max": 2},
            "time_to_detect_s": {"max": 8},
            "time_to_recover_s": 30,
            "goodput": {"min": 0.1},
            "baseline": {"tolerance": 1e-6},
        },
    }


def write(folder: Path, data: Any, stem: str = "sample") -> Path:
    path = folder / f"{stem}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def errors(path: Path) -> list[str]:
    """Loading `path` fails with one line per problem, each starting with the file; returns the problems."""
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    lines = str(caught.value).splitlines()
    assert lines == list(caught.value.problems) and all(x.startswith(f"{path}: ") for x in lines), lines
    return [x.removeprefix(f"{path}: ") for x in lines]


def error(path: Path) -> str:
    """The first problem of `path`."""
    return errors(path)[0]


def assert_clean(call: Callable[[], Scenario], source: str) -> None:
    """The loader's promise: a Scenario, or a ScenarioError of one line per problem, each starting with the
    source."""
    try:
        assert isinstance(call(), Scenario)
    except ScenarioError as e:
        lines = str(e).splitlines()
        assert lines and all(x.startswith(f"{source}: ") for x in lines), str(e)


def test_a_complete_scenario_loads(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, valid()))
    assert [f.type for f in scenario.faults] == ["rank_killed", "rank_hung", "random"]
    assert scenario.expect.time_to_recover_s.min == scenario.expect.time_to_recover_s.max == 30
    assert scenario.expect.baseline.tolerance == 1e-6
    assert scenario.ft.rank_section_timeouts == {"setup": 30.0, "step": 5.5}


def test_defaults_fill_what_a_scenario_leaves_out() -> None:
    scenario = parse_scenario({"name": "tiny", "description": "d", "world_size": 1}, "tiny.yaml")
    assert (scenario.launcher, scenario.recipe, scenario.max_restarts, scenario.seed) == ("ft_launcher", "tiny_cpu", 3, 0)
    assert scenario.faults == [] and scenario.expect.baseline is None


def test_trainer_config_points_the_trainer_into_the_run_folder(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, valid()))
    cfg = load_config(scenario.recipe, None, scenario.trainer_overrides("/runs/r1"))
    assert (cfg.checkpoint.save, cfg.logger.run_dir) == ("/runs/r1/checkpoints", "/runs/r1")
    assert (cfg.train.train_iters, cfg.checkpoint.save_interval, cfg.optimizer.min_lr) == (12, 5, 1e-5)
    assert cfg.model.hidden_size == 32  # from the tiny_cpu recipe


@FUZZ
@given(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text())
def test_trainer_overrides_read_back_as_the_same_values(value: Any) -> None:
    # The trainer parses its overrides as YAML scalars: '5' must stay a string and 1e-05 a float.
    override = Scenario.model_construct(trainer={"section.key": value}).trainer_overrides("/run")[0]
    key, back = parse_override(override)
    assert key == "section.key" and back == value and type(back) is type(value)


def _at(data: dict[str, Any], path: str) -> tuple[Any, Any]:
    """The container and key a dotted path names ('faults.0.rank'); a trainer override key is one step."""
    *parents, last = path.split(".", 1) if path.startswith("trainer.") else path.split(".")
    node: Any = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node, int(last) if isinstance(node, list) else last


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        node, key = _at(data, path)
        node[key] = value

    return change


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        node, key = _at(data, path)
        del node[key]

    return change


RULES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "unknown top-level key": (_set("colour", "red"), "colour: unknown key; known: schema_version, name,"),
    "unknown key in expect": (_set("expect.restart", 1), "expect.restart: unknown key; known: exit_code,"),
    "unknown key in a fault": (_set("faults.0.step", 3), "faults[0].step: unknown key; known: rank, at_step,"),
    "unknown key in a limit": (_set("expect.lost_steps.most", 3), "expect.lost_steps.most: unknown key"),
    "unknown ft option": (_set("ft.heartbeat", 3), "ft.heartbeat: unknown key; known: initial_rank_heartbeat"),
    "non-string key": (lambda data: data.update({7: "x"}), "[7]: unknown key"),
    "string for an int": (_set("world_size", "2"), "world_size: must be an integer, got '2'"),
    "float for an int": (_set("world_size", 2.0), "world_size: must be an integer, got 2.0"),
    "bool for an int": (_set("seed", True), "seed: must be an integer, got true"),
    "string for a fault's rank": (_set("faults.0.rank", "1"), "faults[0].rank: must be an integer, got '1'"),
    "negative rank": (_set("faults.0.rank", -1), "faults[0].rank: must be greater than or equal to 0, got -1"),
    "list for a string": (_set("description", ["a"]), "description: must be a string, got a list"),
    "missing field": (_drop("description"), "description: required"),
    "unknown launcher": (_set("launcher", "srun"), "launcher: must be 'ft_launcher' or 'torchrun', got 'srun'"),
    "unknown recipe": (_set("recipe", "huge"), "recipe: unknown recipe 'huge'"),
    "bad name": (_set("name", "a b"), "name: must match pattern"),
    "infinite deadline": (_set("deadline_s", float("inf")), "deadline_s: must be a finite number, got inf"),
    "world too large": (_set("world_size", 65), "world_size: must be less than or equal to 64, got 65"),
    "faults not a list": (_set("faults", {"type": "rank_killed"}), "faults: must be a list, got a mapping"),
    "fault not a mapping": (_set("faults.0", 5), "faults[0]: must be a mapping, got 5"),
    "unknown fault type": (
        _set("faults.1.type", "zap"),
        "faults[1].type: unknown fault type 'zap'; known: rank_hung, rank_killed, random",
    ),
    "fault without a type": (_drop("faults.0.type"), "faults[0].type: required"),
    "rank outside the world": (_set("faults.0.rank", 2), "faults[0].rank: 2 is outside the world (world_size 2)"),
    "rank left out of rank_killed": (_drop("faults.0.rank"), "faults[0].rank: required for rank_killed"),
    "at_step past train_iters": (_set("faults.0.at_step", 13), "faults[0].at_step: 13 is past train.train_iters (12)"),
    "both triggers": (_set("faults.0.after_s", 1.0), "faults[0]: give exactly one trigger: at_step or after_s"),
    "neither trigger": (_drop("faults.2.at_step"), "faults[2]: give exactly one trigger: at_step or after_s"),
    "after_s past the deadline": (_set("faults.1.after_s", 60), "faults[1].after_s: 60 is past deadline_s (60)"),
    "attempt past max_restarts": (_set("faults.1.attempt", 3), "faults[1].attempt: 3 is past the run's last attempt (2: max_restarts 2)"),
    "min above max": (
        _set("expect.lost_steps", {"min": 3, "max": 1}),
        "expect.lost_steps: min (3) is greater than max (1): no value can hold",
    ),
    "empty limit": (_set("expect.lost_steps", {}), "expect.lost_steps: a limit needs min, max or both"),
    "limit of the wrong type": (
        _set("expect.time_to_detect_s", "fast"),
        "expect.time_to_detect_s: expected a number or {min: a, max: b}, got 'fast'",
    ),
    "resumed_from_step not a checkpoint step": (
        _set("expect.resumed_from_step", 6),
        "expect.resumed_from_step: 6 is not a checkpoint step (save_interval 5, train_iters 12)",
    ),
    "resume without checkpoints": (
        _drop("trainer.checkpoint.save_interval"),
        "expect.resumed_from_step: the trainer saves no checkpoints",
    ),
    "completed_steps past train_iters": (
        _set("expect.completed_steps", 13),
        "expect.completed_steps: 13 is past train.train_iters (12)",
    ),
    "restarts beyond max_restarts": (
        _set("expect.restarts", {"min": 3}),
        "expect.restarts: min 3 is past the run's last attempt (2: max_restarts 2)",
    ),
    "detection beyond the deadline": (
        _set("expect.time_to_detect_s", {"min": 61}),
        "expect.time_to_detect_s: min 61 is beyond deadline_s (60)",
    ),
    "goodput above 1": (_set("expect.goodput", {"max": 1.5}), "expect.goodput: min and max must lie within [0, 1]"),
    "unknown baseline": (_set("expect.baseline", "fuzzy"), "expect.baseline: must be 'exact', got 'fuzzy'"),
    "negative tolerance": (
        _set("expect.baseline.tolerance", -1),
        "expect.baseline.tolerance: must be greater than or equal to 0, got -1",
    ),
    "zero section timeout": (
        _set("ft.rank_section_timeouts.step", 0),
        "ft.rank_section_timeouts.step: must be greater than 0, got 0",
    ),
    "unknown trainer override key": (
        _set("trainer.train.train_itters", 5),
        "trainer: unknown config key 'train.train_itters'",
    ),
    "unknown trainer override section": (_set("trainer.trian.train_iters", 5), "trainer: unknown config section 'trian'"),
    "string for an int override": (
        _set("trainer.train.train_iters", "12"),
        "trainer: train.train_iters: expected an integer, got '12'",
    ),
    "bad bool override": (
        _set("trainer.model.bf16", "maybe"),
        "trainer: model.bf16: expected true or false, got 'maybe'",
    ),
    "bad literal override": (
        _set("trainer.optimizer.optimizer", "lion"),
        "trainer: optimizer.optimizer: must be one of ['adam', 'sgd'], got 'lion'",
    ),
    "non-scalar override": (
        _set("trainer.train.train_iters", [12]),
        "trainer.train.train_iters: must be a number, a string, true, false or null, got a list",
    ),
    "override the runner owns": (
        _set("trainer.checkpoint.save", "/elsewhere"),
        "trainer.checkpoint.save: set by the runner",
    ),
    "a component to run, named by the scenario": (
        _set("trainer.fault_injection.component", "chaos"),
        "trainer.fault_injection.component: set by the runner",
    ),
    "simulated fault rank outside the world": (
        _set("trainer.ft.simulated_fault_rank", 2),
        "trainer.ft.simulated_fault_rank: 2 is outside the world (world_size 2)",
    ),
    "schema_version mismatch": (_set("schema_version", 2), "schema_version: 2 is not supported (use 1)"),
}


@pytest.mark.parametrize(("change", "expected"), RULES.values(), ids=RULES.keys())
def test_each_rule_names_the_file_and_the_field(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], expected: str
) -> None:
    data = valid()
    change(data)
    assert error(write(tmp_path, data)).startswith(expected)


EVERY_PROBLEM: dict[str, tuple[dict[str, Any], list[str]]] = {
    "fields and a rule": (
        {"max_restarts": -1, "seed": "x", "faults": [{"type": "rank_killed", "rank": 7, "at_step": 3}]},
        [
            "max_restarts: must be greater than or equal to 0, got -1",
            "seed: must be an integer, got 'x'",
            "faults[0].rank: 7 is outside the world (world_size 2)",
        ],
    ),
    "a rule that reads a broken field waits for it": (
        {"max_restarts": "5", "faults": [{"type": "rank_killed", "rank": 1, "attempt": 4, "at_step": 3}]},
        ["max_restarts: must be an integer, got '5'"],
    ),
    "unknown keys, and a field beside them": (
        {"colour": "red", "shape": 1, "seed": -1},
        ["colour: unknown key; known:", "shape: unknown key; known:", "seed: must be greater than or equal to 0"],
    ),
    "every trainer key": (
        {"trainer": {"train.train_itters": 5, "model.bf16": "maybe", "optimizer.optimizer": "lion"}},
        ["trainer: unknown config key 'train.train_itters'", "trainer: model.bf16: expected true or false",
         "trainer: optimizer.optimizer: must be one of"],
    ),
    "the rules wait for a broken trainer": (
        {"trainer": {"train.train_iters": [3]}, "faults": [{"type": "rank_killed", "rank": 7, "at_step": 3}]},
        ["trainer.train.train_iters: must be a number"],
    ),
    "several rules": (
        {"faults": [{"type": "rank_killed", "rank": 2, "at_step": 30}], "expect": {"completed_steps": 40}},
        ["faults[0].rank: 2 is outside the world", "faults[0].at_step: 30 is past train.train_iters (20)",
         "expect.completed_steps: 40 is past train.train_iters (20)"],
    ),
    "a batch the trainer refuses for this world": (
        {"trainer": {"train.global_batch_size": 6, "train.micro_batch_size": 2}},
        ["trainer: train.global_batch_size (6) must be a multiple of micro_batch_size x world size (2 x 2)"],
    ),
}


@pytest.mark.parametrize(("fields", "expected"), EVERY_PROBLEM.values(), ids=EVERY_PROBLEM.keys())
def test_every_problem_of_a_file_is_reported_and_none_that_is_not_there(
    tmp_path: Path, fields: dict[str, Any], expected: list[str]
) -> None:
    data = {"schema_version": 1, "name": "sample", "description": "x", "world_size": 2, **fields}
    found = errors(write(tmp_path, data))
    assert len(found) == len(expected) and all(f.startswith(e) for f, e in zip(found, expected, strict=True)), found


IN_PROCESS = {"inprocess_restart.enabled": True}


@pytest.mark.parametrize(
    ("top", "trainer", "last"),
    [
        ({}, {}, 2),
        ({"relaunch": True}, {}, 5),
        ({}, {**IN_PROCESS, "inprocess_restart.max_iterations": 2}, 5),
        ({}, IN_PROCESS, None),
    ],
    ids=["launcher rounds", "with a relaunch", "in-process, bounded", "in-process, unbounded"],
)
def test_the_last_attempt_counts_every_kind_of_restart(top: dict[str, Any], trainer: dict[str, Any], last: int | None) -> None:
    """max_restarts 2: three launcher rounds, a relaunch doubles them, in-process restarts multiply them."""
    data = {**valid(), **top}
    data["trainer"].update(trainer)
    scenario = parse_scenario(data, "sample.yaml")
    assert scenario.last_attempt()[0] == last


def test_name_must_match_the_file_name(tmp_path: Path) -> None:
    path = write(tmp_path, valid(), stem="other")
    assert error(path) == "name: 'sample' does not match the file name 'other'"


BROKEN_FILES: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "the file is empty"),
    "only comments": (b"# nothing yet\n", "the file is empty"),
    "a list": (b"- name: x\n", "a scenario must be a mapping of fields, got a list"),
    "a scalar": (b"rank_killed\n", "a scenario must be a mapping of fields, got 'rank_killed'"),
    "binary": (bytes(range(256)), "not a text file (not UTF-8)"),
    "a NUL character": (b"name: a\x00b\n", "not valid YAML: unacceptable character"),
    "unclosed bracket": (b"name: x\nfaults: [1, 2\n", "not valid YAML: line 3, column 1:"),
    "tab indentation": (b"expect:\n\texit_code: 0\n", "not valid YAML: line 2, column 1:"),
    "unhashable key": (b"? [1]\n: 2\n", "not valid YAML: line 1, column 3: found unhashable key"),
    "python tag": (b"name: !!python/object:os.system x\n", "not valid YAML: line 1, column 7:"),
    "impossible date": (b"name: 2001-02-30\n", "not valid YAML: day is out of range for month"),
    "deeply nested": (b"[" * 5000 + b"]" * 5000, "not valid YAML: "),  # libyaml: 'maximum nesting depth'; PyYAML: 'nested too deeply'
    "recursive alias": (b"name: &a [*a]\n", "its aliases expand it past 100000 values"),
    "an alias bomb": (
        b"a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        b"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        b"e: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n",
        "its aliases expand it past 100000 values",
    ),
}


@pytest.mark.parametrize(("content", "expected"), BROKEN_FILES.values(), ids=BROKEN_FILES.keys())
def test_a_broken_file_is_one_clean_error(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "sample.yaml"
    path.write_bytes(content)
    assert error(path).startswith(expected)


def test_a_missing_file_or_a_folder_cannot_be_read(tmp_path: Path) -> None:
    assert error(tmp_path / "absent.yaml") == "cannot read (No such file or directory)"
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    assert error(folder).startswith("cannot read (Is a directory")


def test_already_loaded_data_names_its_source() -> None:
    with pytest.raises(ScenarioError, match=r"^inline: a scenario must be a mapping of fields, got null$"):
        parse_scenario(None, "inline")


def test_deeply_nested_data_is_one_clean_error() -> None:
    deep: Any = "leaf"
    for _ in range(10_000):
        deep = [deep]
    data = {**valid(), "faults": [deep], "trainer": {"train.train_iters": deep}}
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data, "inline")
    assert caught.value.problems == (
        "inline: trainer.train.train_iters: must be a number, a string, true, false or null, got a list",
        "inline: faults[0]: must be a mapping, got a list",
    )


FILES = scenario_files(SCENARIOS)


def test_the_scenarios_folder_is_not_empty() -> None:
    assert FILES, f"no *.yaml in {SCENARIOS}"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_shipped_scenario_loads(path: Path) -> None:
    assert load_scenario(path).name == path.stem


# Property tests: whatever the input, a Scenario or one clean line that starts with the source.

NAMES = sorted(
    {*Scenario.model_fields, "type", "rank", "at_step", "after_s", "min", "max", "tolerance", "train.train_iters"}
)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
KEYS = st.sampled_from(NAMES) | st.text(max_size=8) | st.integers() | st.none()
YAMLISH = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=5), max_leaves=25
)


@FUZZ
@given(YAMLISH | st.dictionaries(KEYS, YAMLISH, max_size=8))
def test_any_data_gives_a_scenario_or_a_clean_error(data: Any) -> None:
    assert_clean(lambda: parse_scenario(data, "fuzz.yaml"), "fuzz.yaml")


VALID_TEXT = yaml.safe_dump(valid(), sort_keys=False)
SPLICED = st.tuples(st.integers(0, len(VALID_TEXT)), st.integers(0, 8), st.text(max_size=6)).map(
    lambda t: VALID_TEXT[: t[0]] + t[2] + VALID_TEXT[t[0] + t[1] :]
)


@FUZZ
@given(st.binary(max_size=300) | st.text(max_size=300) | YAMLISH.map(yaml.safe_dump) | SPLICED)
def test_any_file_gives_a_scenario_or_a_clean_error(tmp_path: Path, content: bytes | str) -> None:
    path = tmp_path / "sample.yaml"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    assert_clean(lambda: load_scenario(path), str(path))


def _spots(node: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) pair inside `node`, at any depth."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    return [spot for key, value in items for spot in [(node, key), *_spots(value)]]


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    """valid() with one to three changes: a key deleted, a value of another type, a key added."""
    data = valid()
    for _ in range(draw(st.integers(1, 3))):
        spots = _spots(data)
        if not spots:
            break
        container, key = draw(st.sampled_from(spots))
        how = draw(st.sampled_from(["delete", "retype", "add"]))
        if how == "delete":
            del container[key]
        elif how == "retype":
            old = type(container[key])
            container[key] = draw(YAMLISH.filter(lambda v, old=old: type(v) is not old))
        else:
            target = container[key] if isinstance(container[key], dict) else data
            target[draw(KEYS)] = draw(SCALARS)
    return data


@FUZZ
@given(mutated())
def test_a_mutated_scenario_gives_a_scenario_or_a_clean_error(data: dict[str, Any]) -> None:
    assert_clean(lambda: parse_scenario(data, "sample.yaml"), "sample.yaml")


def test_the_trainer_config_is_built_once_and_carried(monkeypatch: pytest.MonkeyPatch, scenarios_dir: Path, tmp_path: Path) -> None:
    import chaos.schema.scenario as schema
    from chaos.judge.baseline import baseline_key
    from chaos.supervise.runner import launcher_command

    built = []
    monkeypatch.setattr(schema, "load_config", lambda *args, real=schema.load_config: built.append(args) or real(*args))
    scenario = load_scenario(scenarios_dir / "inprocess_exception.yaml")
    assert len(built) == 1
    assert scenario.config.inprocess_restart.enabled and not scenario.runs_alone and baseline_key(scenario)
    assert "--rdzv-backend=static" in launcher_command(scenario, tmp_path, 29500, [])
    assert len(built) == 1
    assert scenario.replace(seed=3).config is not scenario.config and len(built) == 2
