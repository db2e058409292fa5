"""The trainer's command line. Config errors exit 2 with one line per problem, naming the key, before
training starts (trainer/session.py reports those met once the process group is up, and unusable
checkpoints, the same way)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings

from trainer.config import ConfigError, TrainerConfig
from trainer.config_loader import load_config
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
        return run(load_config(args.recipe, args.config, args.overrides))
    except ConfigError as e:  # the config, or the machine it asks for (dist.device=cuda without CUDA)
        for problem in e.problems:
            print(f"trainer: error: {problem}", file=sys.stderr)
        return 2


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
