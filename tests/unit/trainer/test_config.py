"""Trainer config: recipe, then YAML file, then dotted overrides; one-line errors naming the key; the digest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trainer.config import TrainerConfig
from trainer.config_base import ConfigError
from trainer.config_loader import build_config, load_config, parse_override
from trainer.recipes import RECIPES

ROOT = Path(__file__).resolve().parents[3]


def config_error(*overrides: str, recipe: str | None = None, config_file: str | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(recipe, config_file, overrides)
    message = str(caught.value)
    assert len(message.splitlines()) == 1, message
    return message


def test_defaults_are_bridge_like() -> None:
    cfg = load_config()
    assert (cfg.train.train_iters, cfg.optimizer.optimizer, cfg.scheduler.lr_decay_style) == (20, "adam", "cosine")
    assert cfg.model.ffn_hidden_size == 4 * cfg.model.hidden_size
    assert cfg.checkpoint.save is None and not cfg.ft.enable_ft_package


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_builds_with_its_values(name: str) -> None:
    cfg = load_config(name)
    for key, value in RECIPES[name].items():
        section, field = key.split(".")
        assert getattr(getattr(cfg, section), field) == value, key


def test_an_unknown_recipe_names_the_known_ones() -> None:
    assert config_error(recipe="huge") == "unknown recipe 'huge'; known: ['gpt_125m', 'tiny_cpu', 'vanilla_gpt']"


def test_a_file_beats_the_recipe_and_an_override_beats_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text("model:\n  hidden_size: 64\ntrain:\n  train_iters: 30\n  micro_batch_size: 3\n")
    cfg = load_config("tiny_cpu", str(path), ["train.train_iters=40"])
    assert cfg.model.hidden_size == 64  # file over recipe (32)
    assert cfg.train.train_iters == 40  # override over file
    assert cfg.train.micro_batch_size == 3  # file over recipe (2)
    assert cfg.model.num_layers == 1  # recipe kept
    assert cfg.optimizer.lr == 1e-3  # default kept


def test_the_last_override_of_a_key_wins() -> None:
    assert load_config(None, None, ["train.train_iters=5", "train.train_iters=7"]).train.train_iters == 7


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("train.train_iters=20", "train.train_iters", 20),
        ("ft.enable_ft_package=true", "ft.enable_ft_package", True),
        ("optimizer.lr=0.002", "optimizer.lr", 0.002),
        ("checkpoint.save=/tmp/run/ckpt", "checkpoint.save", "/tmp/run/ckpt"),
        ("checkpoint.load=", "checkpoint.load", None),
        ("train.exit_interval=null", "train.exit_interval", None),
        ("checkpoint.save='5'", "checkpoint.save", "5"),
        ("logger.run_dir={a: 1}", "logger.run_dir", "{a: 1}"),
    ],
)
def test_an_override_value_is_read_as_a_yaml_scalar(text: str, key: str, value: object) -> None:
    assert parse_override(text) == (key, value)


@pytest.mark.parametrize("text", ["train.train_iters", "train_iters=3", "=3"])
def test_an_override_needs_section_key_and_value(text: str) -> None:
    assert config_error(text).startswith(f"bad override {text!r}: expected section.key=value")


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("trian.train_iters=3", "unknown config section 'trian' in key 'trian.train_iters'; known: ["),
        ("train.train_itters=3", "unknown config key 'train.train_itters'; train has: ["),
        ("train.train_iters=abc", "train.train_iters: expected an integer, got 'abc'"),
        ("train.train_iters=2.5", "train.train_iters: expected an integer, got 2.5"),
        ("train.train_iters=true", "train.train_iters: expected an integer, got True"),
        ("model.bf16=maybe", "model.bf16: expected true or false, got 'maybe'"),
        ("model.bf16=1", "model.bf16: expected true or false, got 1"),
        ("optimizer.lr=fast", "optimizer.lr: expected a number, got 'fast'"),
        ("optimizer.lr=true", "optimizer.lr: expected a number, got True"),
        ("optimizer.optimizer=lion", "optimizer.optimizer: must be one of ['adam', 'sgd'], got 'lion'"),
        ("checkpoint.save=true", "checkpoint.save: expected a string, got True"),
        ("train.train_iters=0", "train.train_iters: must be >= 1, got 0"),
        ("scheduler.lr_warmup_iters=20", "scheduler.lr_warmup_iters (20) must be < scheduler.lr_decay_iters (20)"),
        ("checkpoint.save_interval=5", "checkpoint.save_interval is set but checkpoint.save is not"),
        ("model.num_attention_heads=3", "model.hidden_size (64) must be divisible by model.num_attention_heads (3)"),
    ],
)
def test_each_bad_key_or_value_is_a_config_error_naming_the_key(override: str, expected: str) -> None:
    assert config_error(override).startswith(expected)


def test_a_constant_schedule_may_warm_up_for_the_whole_run() -> None:
    cfg = load_config(None, None, ["scheduler.lr_decay_style=constant", "scheduler.lr_warmup_iters=20"])
    assert cfg.scheduler.lr_warmup_iters == 20


def test_the_file_is_as_strict_as_an_override(tmp_path: Path) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text("train:\n  train_iters: '12'\n")
    assert config_error(config_file=str(path)) == "train.train_iters: expected an integer, got '12'"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("train: [1,\n", "not valid YAML: line 2, column 1: "),
        ("- train\n", "top level must be a mapping, got list"),
        ("trainer:\n  train_iters: 3\n", "unknown config section 'trainer'"),
        ("train: 5\n", "unknown config key 'train'"),
    ],
)
def test_an_invalid_yaml_file_is_a_config_error(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(content)
    assert expected in config_error(config_file=str(path))


def test_an_unreadable_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    assert config_error(config_file=str(missing)) == f"{missing}: cannot read (No such file or directory)"


def test_build_config_takes_flat_dotted_keys() -> None:
    cfg = build_config({"train.train_iters": 8, "optimizer.lr": 1})
    assert cfg.train.train_iters == 8 and cfg.optimizer.lr == 1.0 and isinstance(cfg.optimizer.lr, float)


@pytest.mark.parametrize(
    "override",
    ["model.num_attention_heads=0", f"optimizer.lr={10**400}"],
    ids=["zero heads", "int too large for a float"],
)
def test_degenerate_values_give_a_config_error(override: str) -> None:
    with pytest.raises(ConfigError):
        load_config(None, None, [override])


def test_an_exponent_without_a_dot_is_a_number() -> None:
    assert load_config(None, None, ["optimizer.lr=1e-3"]).optimizer.lr == 1e-3


# The digest names the numbers a run computes: the baseline cache and run_start events key on it.

BASE = ("checkpoint.save=/tmp/a", "checkpoint.save_interval=5")


def digest(*overrides: str) -> str:
    return load_config("tiny_cpu", None, [*BASE, *overrides]).digest()


def test_the_digest_is_stable_across_processes() -> None:
    code = f"from trainer.config_loader import load_config; print(load_config('tiny_cpu', None, {list(BASE)!r}).digest())"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == digest() == digest()


@pytest.mark.parametrize(
    "override",
    [
        "logger.run_dir=/tmp/elsewhere",
        "logger.log_interval=5",
        "fault_injection.component=chaos fault_injection.plan=/tmp/plan.json",
        "ft.enable_ft_package=true",
        "ft.simulate_fault=true",
        "dist.distributed_backend=gloo",
        "inprocess_restart.enabled=true",
        "checkpoint.save=/tmp/b",
        "checkpoint.async_save=true",
    ],
)
def test_the_digest_ignores_settings_that_do_not_change_the_numbers(override: str) -> None:
    assert digest(*override.split()) == digest()


@pytest.mark.parametrize(
    "override",
    [
        "model.num_layers=2",
        "model.hidden_size=64",
        "optimizer.lr=0.002",
        "optimizer.optimizer=sgd",
        "scheduler.lr_decay_style=linear",
        "train.train_iters=21",
        "rng.seed=7",
        "checkpoint.save_interval=4",
    ],
)
def test_the_digest_changes_with_settings_that_change_the_numbers(override: str) -> None:
    assert digest(override) != digest()


def test_the_digest_is_a_short_hex_string() -> None:
    value = TrainerConfig().digest()
    assert len(value) == 16 and int(value, 16) >= 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["fault_injection.plan=/tmp/p.json"], "fault_injection.plan is set but fault_injection.component is not"),
        (["fault_injection.component=chaos"], "fault_injection.component is set but fault_injection.plan is not"),
        (
            ["fault_injection.component=nope", "fault_injection.plan=/tmp/p.json"],
            "fault_injection.component: 'nope' is not installed (installed: chaos)",
        ),
    ],
)
def test_a_fault_injector_is_armed_only_by_an_installed_component_and_its_plan(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_config("tiny_cpu", None, overrides)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)
    armed = load_config("tiny_cpu", None, ["fault_injection.component=chaos", "fault_injection.plan=/tmp/p.json"])
    assert armed.fault_injection.component == "chaos"
