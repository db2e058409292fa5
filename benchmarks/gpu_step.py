"""`python -m benchmarks.gpu_step --out DIR [--smoke]`: the trainer's step on one GPU, modes side by side.

In one process, for the 125M recipe and the 1B shape (20 layers, hidden 2048, 16 heads, seq 2048) at micro
batch 4 and 8: median step time, tokens/s, MFU and peak memory of three modes, each a Trainer built from its
config as a run builds it (trainer.loop):

- ``det``: ``model.deterministic_mode`` as it is now (flash / memory-efficient attention with deterministic
  backward, fused AdamW, no fill of uninitialized memory);
- ``det-old``: deterministic as it was (``model.attention_backend=math``, ``optimizer.adam_impl=for_loop``,
  torch's default fill of uninitialized memory);
- ``nondet``: determinism off (every attention backend, torch's priority; fused AdamW).

It checks that ``det`` repeats bit for bit: a second Trainer of the same config gives the same losses and
the same weights. An attention section times SDPA alone per backend, with determinism on and off, and
checks whether each backward repeats. Writes DIR/gpu_step.json and DIR/gpu_step.md after every row.

A row that does not fit the card (torch.cuda.OutOfMemoryError: det-old at 1B mbs 8 needs about 89 GiB, more
than an H100 has) is listed as skipped with the reason; a row that fails otherwise is listed as failed with
its error. Neither ends the benchmark: the other rows are measured. The exit code is 1 when a row failed or
``det`` did not repeat, else 0. ``--override KEY=VALUE`` (repeatable) applies to every row.

MFU, two ways: ``mfu_6n``, 6 x all parameters per token (the formula of the figures measured before this
benchmark, docs/performance.md ("GPU step"), so that they compare), and ``mfu_model``, the model FLOPs of PaLM (Chowdhery et al.
2022, appendix B): 6 x the weights that enter matmuls (the tied LM head included, the embedding lookups not)
plus 12 x layers x hidden x seq for the attention scores and their weighting (the full square: causal
kernels skip half of it, MFU does not credit the skip away). Both over 989 TFLOP/s (H100/H200 dense bf16).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PEAK_FLOPS = 989e12
"""Dense bf16 tensor-core peak of an H100/H200 SXM, FLOP/s."""

BASE = ["dataset.corpus_bytes=262144", "train.train_iters=1000", "logger.log_interval=1000000"]
"""A small corpus (building it is not what is timed); the schedule's length does not change a step's cost."""


@dataclass(frozen=True)
class Shape:
    name: str
    overrides: tuple[str, ...]
    modes: tuple[str, ...] = ("nondet", "det", "det-old")
    """det-old's math attention materialises the scores: 89 GiB at 1B mbs 8, past the GPU at mbs 16."""


SHAPES = [
    Shape("1b mbs4", ("model.num_layers=20", "model.hidden_size=2048", "model.num_attention_heads=16",
                      "model.seq_length=2048", "train.micro_batch_size=4")),
    Shape("1b mbs8", ("model.num_layers=20", "model.hidden_size=2048", "model.num_attention_heads=16",
                      "model.seq_length=2048", "train.micro_batch_size=8")),
    Shape("1b mbs16", ("model.num_layers=20", "model.hidden_size=2048", "model.num_attention_heads=16",
                       "model.seq_length=2048", "train.micro_batch_size=16"), ("nondet", "det")),
    Shape("125m mbs8", ()),
]
SMOKE_SHAPES = [Shape("smoke", ("model.num_layers=2", "model.hidden_size=64", "model.num_attention_heads=4",
                                "model.seq_length=64", "model.bf16=false", "train.micro_batch_size=2"))]

MODES: dict[str, tuple[str, ...]] = {
    "nondet": ("model.deterministic_mode=false",),
    "det": ("model.deterministic_mode=true",),
    "det-old": ("model.deterministic_mode=true", "model.attention_backend=math", "optimizer.adam_impl=for_loop"),
}


def flops_per_token(num_layers: int, hidden: int, ffn: int, vocab: int, seq: int) -> tuple[float, float]:
    """Training FLOPs per token, (matmul weights, attention): 6 x the weights of every matmul (q, k, v,
    projection, the MLP's two, the LM head) and 12 x L x h x s for QK^T and AV (2 FLOPs a multiply-add, x3
    for forward and backward)."""
    per_layer = 4 * hidden * hidden + 2 * hidden * ffn
    return 6.0 * (num_layers * per_layer + hidden * vocab), 12.0 * num_layers * hidden * seq


def mfu(flops_per_tok: float, tokens_per_s: float, peak: float = PEAK_FLOPS) -> float:
    return flops_per_tok * tokens_per_s / peak


def same_run(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two runs repeat bit for bit: every step's loss equal, and every final weight tensor equal."""
    import torch

    return a["losses"] == b["losses"] and len(a["weights"]) == len(b["weights"]) and all(
        torch.equal(x, y) for x, y in zip(a["weights"], b["weights"], strict=True))


def reset_determinism() -> None:
    """Each Trainer starts from torch's defaults, as in a fresh process (Trainer turns determinism on)."""
    import torch

    torch.use_deterministic_algorithms(False)
    torch.utils.deterministic.fill_uninitialized_memory = True


def chosen_attention(trainer: Any) -> str:
    """The SDPA backend torch picks for this model's attention, under the model's own backend list."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from trainer.model import attention_backends

    m, env = trainer.cfg.model, trainer.env
    dtype = torch.bfloat16 if m.bf16 and env.device.type == "cuda" else torch.float32
    shape = (trainer.cfg.train.micro_batch_size, m.num_attention_heads, m.seq_length, m.hidden_size // m.num_attention_heads)
    q = torch.randn(shape, device=env.device, dtype=dtype, requires_grad=True)
    with sdpa_kernel(attention_backends(m, env.device)):
        return SDPBackend(torch._fused_sdp_choice(q, q, q, is_causal=True)).name


def measure(
    shape: Shape, mode: str, env: Any, warmup: int, timed: int, keep_weights: bool, extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Build the Trainer of (shape, mode), run warmup + timed steps; the row and the run's losses/weights."""
    import torch

    from runlog.log import EventLog
    from trainer.config_loader import load_config
    from trainer.loop import Trainer, adam_fused

    cuda = env.device.type == "cuda"
    reset_determinism()
    recipe = "tiny_cpu" if shape.name == "smoke" else "gpt_125m"
    cfg = load_config(recipe, None, [*BASE, f"dist.device={env.device.type}", *shape.overrides, *MODES[mode], *extra])
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t_build = time.perf_counter()
    trainer = Trainer(cfg, env, EventLog(None, "bench", env.rank), [])
    build_s = time.perf_counter() - t_build
    if mode == "det-old":
        torch.utils.deterministic.fill_uninitialized_memory = True  # torch's default, which the trainer used
    try:
        attention = chosen_attention(trainer)
        losses, times = [], []
        for step in range(1, warmup + timed + 1):
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            losses.append(trainer.train_step(step))  # ends in .item(): the step is done
            times.append(time.perf_counter() - t0)
        weights = [p.detach().cpu() for p in trainer.model.parameters()] if keep_weights else []
        m = cfg.model
        n_params = sum(p.numel() for p in trainer.model.parameters())
        dense, attn = flops_per_token(m.num_layers, m.hidden_size, m.ffn_hidden_size, m.vocab_size, m.seq_length)
        step_s = statistics.median(times[warmup:])
        tokens_per_s = cfg.train.global_batch(env.world_size) * m.seq_length / step_s
        adam = "fused" if adam_fused(cfg.optimizer, env.device) else "for_loop"
        row = {
            "shape": shape.name, "mode": mode, "attention": attention, "adam": adam,
            "torch_det": torch.are_deterministic_algorithms_enabled(),
            "fill_uninit": torch.are_deterministic_algorithms_enabled() and torch.utils.deterministic.fill_uninitialized_memory,
            "step_ms": round(step_s * 1000, 1), "step_ms_min": round(min(times[warmup:]) * 1000, 1),
            "tokens_per_s": round(tokens_per_s), "mfu_6n_%": round(100 * mfu(6.0 * n_params, tokens_per_s), 1),
            "mfu_model_%": round(100 * mfu(dense + attn, tokens_per_s), 1),
            "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1) if cuda else None,
            "params_m": round(n_params / 1e6, 1), "build_s": round(build_s, 1),
        }
        return {"row": row, "losses": losses, "weights": weights}
    finally:
        trainer.close()
        del trainer
        gc.collect()


def unmeasured(shape: Shape, mode: str, error: BaseException) -> dict[str, Any]:
    """The row of a (shape, mode) that raised: skipped when it does not fit the card (out of memory), else
    failed; the reason is the error's first line."""
    import torch

    text = str(error).splitlines()[0][:160] if str(error) else type(error).__name__
    if isinstance(error, torch.cuda.OutOfMemoryError):
        card = ""
        if torch.cuda.is_available():
            card = f" (the card has {torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB)"
        return {"shape": shape.name, "mode": mode, "outcome": "skipped", "reason": f"does not fit{card}: {text}"}
    return {"shape": shape.name, "mode": mode, "outcome": "failed", "reason": f"{type(error).__name__}: {text}"}


def measure_or_note(
    shape: Shape, mode: str, env: Any, warmup: int, timed: int, keep_weights: bool, extra: tuple[str, ...]
) -> dict[str, Any] | None:
    """measure(), or None with the error noted in the row (``unmeasured``): one row's failure, an out of
    memory above all, never ends the benchmark. The memory of a row that raised is given back first."""
    import torch

    try:
        return measure(shape, mode, env, warmup, timed, keep_weights, extra)
    except Exception as e:  # noqa: BLE001 - any error of one row is that row's outcome, reported in its row
        row = unmeasured(shape, mode, e)
        print(f"  {row['outcome']}: {shape.name} {mode}: {row['reason']}", flush=True)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return {"row": row}


def attention_section(shapes: list[Shape], device: Any, reps: int) -> list[dict[str, Any]]:
    """SDPA fwd+bwd alone per backend, determinism on (strict, no fill) and off: median ms, and whether two
    backward passes gave the same gradients bit for bit. A backend torch refuses shows as 'refused'."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from trainer.config_loader import load_config

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rows = []
    for shape in shapes:
        m = load_config("gpt_125m", None, list(shape.overrides)).model
        b = int(next((o.split("=")[1] for o in shape.overrides if o.startswith("train.micro_batch_size")), 8))
        dims = (b, m.num_attention_heads, m.seq_length, m.hidden_size // m.num_attention_heads)
        gen = torch.Generator(device).manual_seed(0)
        q, k, v, g = (torch.randn(dims, device=device, dtype=torch.bfloat16, generator=gen) for _ in range(4))
        for det in (True, False):
            reset_determinism()
            if det:
                torch.use_deterministic_algorithms(True)
                torch.utils.deterministic.fill_uninitialized_memory = False
            for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
                row: dict[str, Any] = {"shape": shape.name, "deterministic": det, "backend": backend.name}
                try:
                    grads, times = [], []
                    for _ in range(reps + 2):
                        qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
                        sync()
                        t0 = time.perf_counter()
                        with sdpa_kernel(backend):
                            F.scaled_dot_product_attention(qq, kk, vv, is_causal=True).backward(g)
                        sync()
                        times.append((time.perf_counter() - t0) * 1000)
                        grads.append(torch.cat([qq.grad.flatten(), kk.grad.flatten(), vv.grad.flatten()]))
                    row["fwd_bwd_ms"] = round(statistics.median(times[2:]), 2)
                    row["bwd_repeats"] = all(torch.equal(grads[0], x) for x in grads[1:])
                except RuntimeError as e:
                    row["fwd_bwd_ms"], row["bwd_repeats"] = "refused", str(e).splitlines()[0][:60]
                rows.append(row)
                print(f"  attention {row}", flush=True)
    reset_determinism()
    return rows


def determinism_row(shape: Shape, runs: dict[str, dict[str, Any]], again: dict[str, Any] | None) -> dict[str, Any]:
    """Whether ``det`` repeated (None: det or its repeat was not measured), and the modes' step times over
    nondet's where both were measured."""
    row: dict[str, Any] = {"shape": shape.name, "bit_identical": None}
    if "det" in runs and again is not None and "losses" in again:
        row.update(bit_identical=same_run(runs["det"], again), last_loss=runs["det"]["losses"][-1],
                   last_loss_again=again["losses"][-1], step_ms_again=again["row"]["step_ms"])
    fastest = runs["nondet"]["row"]["step_ms"] if "nondet" in runs else None
    for mode, key in (("det", "det_vs_nondet"), ("det-old", "det_old_vs_nondet")):
        row[key] = round(runs[mode]["row"]["step_ms"] / fastest, 2) if fastest and mode in runs else None
    return row


def write(out: Path, results: dict[str, Any]) -> str:
    from benchmarks.report import markdown_table

    text = (f"# GPU step: deterministic vs not\n\n{results['machine']}\n\n## Steps\n\n{markdown_table(results['steps'])}"
            f"\n## Determinism of `det` (two Trainers, same seed)\n\n{markdown_table(results['determinism'])}"
            f"\n## Attention alone (fwd+bwd)\n\n{markdown_table(results['attention'])}")
    (out / "gpu_step.json").write_text(json.dumps(results, indent=1, default=str))
    (out / "gpu_step.md").write_text(text)
    return text


def machine(env: Any) -> dict[str, Any]:
    import torch
    from torch.nn.attention import SDPBackend

    info: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "torch": torch.__version__,
                            "device": str(env.device), "sdp_priority": [SDPBackend(i).name for i in getattr(torch._C, "_get_sdp_priority_order", list)()]}
    if env.device.type == "cuda":
        info.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
    return info


def run(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before cuBLAS starts: every mode alike
    from trainer.config import DistConfig
    from trainer.distributed import init_distributed

    env = init_distributed(DistConfig(device="cpu" if args.smoke else "cuda"))
    shapes, warmup, timed = (SMOKE_SHAPES, 1, 2) if args.smoke else (SHAPES, args.warmup, args.steps)
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"machine": machine(env), "steps": [], "determinism": [], "attention": []}
    t0 = time.perf_counter()
    extra = tuple(args.override)
    for shape in shapes:
        runs = {}
        for mode in shape.modes:
            runs[mode] = measure_or_note(shape, mode, env, warmup, timed, mode == "det", extra)
            results["steps"].append(runs[mode]["row"])
            print(f"[{time.perf_counter() - t0:6.1f}s] {runs[mode]['row']}", flush=True)
            write(args.out, results)
        measured = {mode: r for mode, r in runs.items() if "losses" in r}
        again = measure_or_note(shape, "det", env, warmup, timed, True, extra) if "det" in measured else None
        results["determinism"].append(determinism_row(shape, measured, again))
        print(f"[{time.perf_counter() - t0:6.1f}s] determinism {results['determinism'][-1]}", flush=True)
        write(args.out, results)
    results["attention"] = attention_section(shapes, env.device, reps=2 if args.smoke else 5)
    results["machine"] = {**machine(env), "wall_s": round(time.perf_counter() - t0, 1)}  # torch settles its SDPA order at the first call
    print(write(args.out, results), flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_step", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("chaos-runs/gpu-step"))
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per Trainer (default: %(default)s)")
    p.add_argument("--steps", type=int, default=8, help="timed steps per Trainer (default: %(default)s)")
    p.add_argument("--smoke", action="store_true", help="a tiny model on CPU: the plumbing, for the unit test")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a trainer config override applied to every row (repeatable)")
    args = p.parse_args(argv)
    if args.warmup < 0 or args.steps < 1:
        p.error("--warmup must be >= 0 and --steps >= 1")
    results = run(args)
    import torch.distributed as dist

    dist.destroy_process_group()
    failed = [r for r in results["steps"] if r.get("outcome") == "failed"]
    return 0 if not failed and all(r["bit_identical"] is not False for r in results["determinism"]) else 1


if __name__ == "__main__":
    sys.exit(main())
