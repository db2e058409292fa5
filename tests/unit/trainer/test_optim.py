"""trainer.optim: torch's own AdamW and SGD arithmetic, bit for bit, without torch.optim.Optimizer (whose
methods import torch._dynamo), a checkpoint layout like DCP's get_state_dict, and a worker that never
imports dynamo."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.startup import _env as worker_env
from trainer.optim import SGD, AdamW

ROOT = Path(__file__).resolve().parents[3]


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.GELU(), torch.nn.Linear(5, 3))


def _train(model: torch.nn.Module, step, zero, set_lr, steps: int = 5) -> list[torch.Tensor]:
    """`steps` steps at a changing learning rate; the weights after the last."""
    torch.manual_seed(1)
    for i in range(steps):
        zero()
        model(torch.randn(4, 6)).pow(2).mean().backward()
        set_lr(1e-2 / (i + 1))
        step()
    return [p.detach().clone() for p in model.parameters()]


def _set(opt: torch.optim.Optimizer):
    def set_lr(lr: float) -> None:
        opt.param_groups[0]["lr"] = lr
    return set_lr


def test_adamw_is_torchs_adamw_bit_for_bit() -> None:
    ref_model, ours_model = _model(), _model()
    ref = torch.optim.AdamW(ref_model.parameters(), lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=False)
    ours = AdamW(list(ours_model.named_parameters()), lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=False)
    expected = _train(ref_model, ref.step, ref.zero_grad, _set(ref))
    got = _train(ours_model, ours.step, ours.zero_grad, lambda lr: setattr(ours, "lr", lr))
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
    for name, state in zip((n for n, _ in ours_model.named_parameters()), ref.state.values(), strict=True):
        assert torch.equal(ours.state[name]["exp_avg_sq"], state["exp_avg_sq"]) and ours.state[name]["step"].item() == 5


def test_sgd_is_torchs_sgd_bit_for_bit() -> None:
    ref_model, ours_model = _model(), _model()
    ref = torch.optim.SGD(ref_model.parameters(), lr=1e-2, weight_decay=0.1)
    ours = SGD(list(ours_model.named_parameters()), lr=1e-2, weight_decay=0.1)
    expected = _train(ref_model, ref.step, ref.zero_grad, _set(ref))
    got = _train(ours_model, ours.step, ours.zero_grad, lambda lr: setattr(ours, "lr", lr))
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))


def _adamw(model: torch.nn.Module) -> AdamW:
    return AdamW(list(model.named_parameters()), lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=False)


def test_the_state_is_there_before_the_first_step_keyed_by_parameter_name() -> None:
    model = _model()
    sd = _adamw(model).state_dict()
    names = [n for n, _ in model.named_parameters()]
    assert list(sd["state"]) == names and all(set(s) == {"step", "exp_avg", "exp_avg_sq"} for s in sd["state"].values())
    (group,) = sd["param_groups"]
    assert group["params"] == names and group["lr"] == 1e-2 and group["betas"] == (0.9, 0.95)


def test_a_loaded_state_goes_on_exactly_as_the_saved_one() -> None:
    a_model, b_model = _model(), _model()
    a, b = _adamw(a_model), _adamw(b_model)
    _train(a_model, a.step, a.zero_grad, lambda lr: setattr(a, "lr", lr), steps=3)
    b_model.load_state_dict(a_model.state_dict())
    saved = a.state_dict()
    b.load_state_dict({"state": {n: {k: t.clone() for k, t in s.items()} for n, s in saved["state"].items()},
                       "param_groups": saved["param_groups"]})
    assert b.lr == a.lr
    after_a = _train(a_model, a.step, a.zero_grad, lambda lr: setattr(a, "lr", lr), steps=2)
    after_b = _train(b_model, b.step, b.zero_grad, lambda lr: setattr(b, "lr", lr), steps=2)
    assert all(torch.equal(x, y) for x, y in zip(after_a, after_b, strict=True))


def test_a_state_of_other_parameters_is_refused() -> None:
    opt = _adamw(_model())
    sd = opt.state_dict()
    with pytest.raises(ValueError, match="do not match the model's"):
        opt.load_state_dict({"state": {"other.weight": sd["state"]["0.weight"]}, "param_groups": sd["param_groups"]})


def test_a_worker_never_imports_dynamo(tmp_path: Path) -> None:
    """The path a launcher takes: a whole `python -m trainer` run with a checkpoint save and its resume."""
    env = worker_env(ROOT)
    for run, iters in (("first", 4), ("resumed", 6)):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "trainer", "--recipe", "tiny_cpu", f"train.train_iters={iters}",
             "checkpoint.save_interval=2", f"checkpoint.save={tmp_path / 'ckpt'}", f"logger.run_dir={tmp_path / run}"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
        assert "torch.distributed.checkpoint" in imported
        assert not [m for m in imported if m.startswith("torch._dynamo")], run
