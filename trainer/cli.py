"""The trainer's command line. Config errors exit 2 with one line per problem, naming the key, before
training starts (trainer/session.py reports those met once the process group is up, and unusable
checkpoints, the same way)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import multiprocessing
import os
import sys
import threading
import warnings
from typing import NoReturn

from runlog.log import EventLog
from runlog.records import ExitOnError, Pitfall
from trainer.config import TrainerConfig
from trainer.config_base import ConfigError
from trainer.config_loader import load_config, parse_override
from trainer.recipes import RECIPES


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m trainer", description="A small GPT trainer with resiliency features.")
    p.add_argument("--recipe", metavar="NAME", help=f"named defaults to start from (Bridge's recipes): {', '.join(sorted(RECIPES))}")
    p.add_argument("--config", metavar="FILE", help="YAML config file (sections as in trainer/config.py)")
    p.add_argument("overrides", nargs="*", metavar="section.key=value", help="dotted overrides, e.g. train.train_iters=20")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg = load_config(args.recipe, args.config, args.overrides)
    except ConfigError as e:
        for problem in e.problems:
            print(f"trainer: error: {problem}", file=sys.stderr)
        report_refusal(args.overrides, e)
        return 2
    try:
        return run(cfg)
    except ConfigError as e:  # the machine the config asks for (dist.device=cuda without CUDA)
        for problem in e.problems:
            print(f"trainer: error: {problem}", file=sys.stderr)
        return 2


def report_refusal(overrides: list[str], error: ConfigError) -> None:
    """A config refused as one of the resiliency card's pitfalls leaves it in the event log when an override
    names the run folder (``logger.run_dir``): a ``pitfall`` event, then its ``exit`` (code 2). Any other
    bad config writes nothing (the error line says it all)."""
    if error.pitfall is None:
        return
    run_dir = None
    for text in overrides:
        with contextlib.suppress(ConfigError):
            key, value = parse_override(text)
            run_dir = value if key == "logger.run_dir" and isinstance(value, str) else run_dir
    if run_dir is None:
        return
    rank = int(os.environ.get("RANK", "0"))
    events = EventLog(run_dir, f"rank-{rank}", rank)
    events.write(Pitfall(error.pitfall, str(error)))
    events.write(ExitOnError("error", 2, None, str(error)))
    events.close()


def run(cfg: TrainerConfig) -> int:
    """Train under the launcher's environment; returns the process exit code."""
    warnings.filterwarnings("ignore", category=FutureWarning)
    if cfg.inprocess_restart.enabled:
        from trainer.resiliency.inprocess import run_inprocess

        logging.basicConfig(
            level=logging.INFO, format=f"[%(asctime)s] [%(levelname)s] [rank{os.environ.get('RANK', 0)}] %(message)s"
        )
        return run_inprocess(cfg)
    from trainer.session import TrainingSession

    with TrainingSession(cfg) as session:
        logging.basicConfig(
            level=logging.INFO, format=f"[%(asctime)s] [%(levelname)s] [rank{session.env.rank}] %(message)s"
        )
        return session.run()


def exit_process(code: int) -> NoReturn:
    """End the process with `code`, skipping the interpreter's teardown when nothing is left for it to do.

    Finalizing the modules torch and dynamo load takes 1.2-1.6 s per process on a 2-core machine
    (docs/records/2026-12-01-functional-suite.md), paid by every rank at the end of every run and every baseline. By now the
    session has closed its event log, its checkpoints and its process group; the teardown's remaining work
    is logging's flush and torch.compile's worker pool (both done here) and the join of children and threads: a
    process that still has one (a data-loader worker, an unfinished writer) exits the normal way, which waits
    for them.
    """
    compile_workers = sys.modules.get("torch._inductor.async_compile")
    if compile_workers is not None:  # torch's own atexit hook, which os._exit skips: its worker sidecar (TE's
        compile_workers.shutdown_compile_workers()  # torch.compile) outlived the rank by 3 s on an H100 otherwise
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    waiting = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if multiprocessing.active_children() or waiting:
        sys.exit(code)
    os._exit(code)
