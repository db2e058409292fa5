"""AdamW and SGD as thin holders of torch's own functional kernels (``torch.optim.adamw.adamw``,
``torch.optim.sgd.sgd``): the arithmetic of ``torch.optim.AdamW`` and ``torch.optim.SGD``, bit for bit.

Why not the ``torch.optim`` classes themselves: every method of ``torch.optim.Optimizer`` (the constructor's
``add_param_group``, ``zero_grad``, ``state_dict``, ``step``) is wrapped to keep ``torch.compile`` out, and
the wrapper imports all of ``torch._dynamo`` on its first call: 0.6 s of CPU in every rank of every attempt
(issue 18), for a trainer that never compiles. Megatron-Core keeps its own optimizer wrapper too.

The state is made when the optimizer is (zeros, step 0, as torch makes it before the first step) so that a
checkpoint has the same keys at every step, and ``state_dict()`` has the layout that
``torch.distributed.checkpoint.state_dict.get_state_dict`` gives a torch optimizer: ``state`` keyed by
parameter name, one entry in ``param_groups``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.optim.adamw import adamw
from torch.optim.sgd import sgd

NamedParams = Sequence[tuple[str, torch.nn.Parameter]]


class Optimizer:
    """One parameter group; the learning rate is set by the schedule before each step (``lr``)."""

    def __init__(self, params: NamedParams, lr: float, hyper: dict[str, Any]):
        self.names = [name for name, _ in params]
        self.params = [p for _, p in params]
        self.lr = lr
        self.hyper = hyper
        self.state: dict[str, dict[str, torch.Tensor]] = {name: self._new_state(p) for name, p in params}

    def _new_state(self, p: torch.Tensor) -> dict[str, torch.Tensor]:
        return {}

    def zero_grad(self) -> None:
        """Zero the gradients in place: they may be views of a gradient buffer (trainer.data_parallel)."""
        for p in self.params:
            if p.grad is not None:
                p.grad.zero_()

    def step(self) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {"state": self.state, "param_groups": [{"lr": self.lr, **self.hyper, "params": list(self.names)}]}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Copy a checkpoint's state in (DCP may have loaded into these tensors already, a local checkpoint
        gives new ones); a state for other parameters is an error, not a silent partial load."""
        if set(sd["state"]) != set(self.state):
            raise ValueError(f"optimizer state names {sorted(sd['state'])[:3]}... do not match the model's")
        with torch.no_grad():
            for name, tensors in self.state.items():
                for key, t in tensors.items():
                    src = sd["state"][name][key]
                    if src is not t:
                        t.copy_(src)
        self.lr = float(sd["param_groups"][0]["lr"])


class AdamW(Optimizer):
    """``torch.optim.AdamW`` without amsgrad: the per-tensor loop, or the fused kernel on CUDA."""

    def __init__(self, params: NamedParams, lr: float, betas: tuple[float, float], eps: float,
                 weight_decay: float, fused: bool):
        self.fused = fused
        super().__init__(params, lr, {"betas": betas, "eps": eps, "weight_decay": weight_decay})

    def _new_state(self, p: torch.Tensor) -> dict[str, torch.Tensor]:
        # Where torch keeps `step`: on the device for the fused kernel, else a CPU scalar.
        step = torch.zeros((), dtype=torch.float32, device=p.device if self.fused else "cpu")
        return {"step": step, "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}

    def step(self) -> None:
        live = [(p, self.state[n]) for n, p in zip(self.names, self.params, strict=True) if p.grad is not None]
        beta1, beta2 = self.hyper["betas"]
        with torch.no_grad():
            adamw(
                [p for p, _ in live], [p.grad for p, _ in live], [s["exp_avg"] for _, s in live],
                [s["exp_avg_sq"] for _, s in live], [], [s["step"] for _, s in live],
                foreach=False, capturable=False, differentiable=False, fused=self.fused or None,
                grad_scale=None, found_inf=None, has_complex=False, amsgrad=False, beta1=beta1, beta2=beta2,
                lr=self.lr, weight_decay=self.hyper["weight_decay"], eps=self.hyper["eps"], maximize=False,
            )


class SGD(Optimizer):
    """``torch.optim.SGD`` without momentum: no state."""

    def __init__(self, params: NamedParams, lr: float, weight_decay: float):
        super().__init__(params, lr, {"weight_decay": weight_decay})

    def step(self) -> None:
        live = [p for p in self.params if p.grad is not None]
        with torch.no_grad():
            sgd(
                live, [p.grad for p in live], [None] * len(live), foreach=False, weight_decay=self.hyper["weight_decay"],
                momentum=0.0, lr=self.lr, dampening=0.0, nesterov=False, maximize=False,
            )
