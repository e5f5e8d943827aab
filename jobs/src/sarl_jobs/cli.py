"""The command line both trainer entrypoints share: ``python -m sarl_jobs.<trainer> CONFIG``
(or ``--config FILE``) and ``--dry-run``, which prints the pod's plan as JSON and runs nothing.

Used by :mod:`sarl_jobs.verl_trainer` and :mod:`sarl_jobs.trl_trainer`; each supplies its plan
and its run. A spec or pod environment the trainer refuses (ValueError) is one line on stderr and
exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any


def job_parser(prog: str, backend: str, plan_fields: str) -> argparse.ArgumentParser:
    """The parser of ``python -m <prog>``: the Experiment YAML and ``--dry-run``."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {prog}",
        description=f"Train an Experiment with {backend} in a PyTorchJob pod (see the module "
        "docstring).",
    )
    parser.add_argument("config", nargs="?", help="the Experiment YAML (as --config)")
    parser.add_argument("--config", dest="config_opt", metavar="FILE", help="the Experiment YAML")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help=f"print this pod's plan ({plan_fields}) as JSON; run nothing",
    )
    return parser


def config_of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The Experiment YAML given positionally or as ``--config`` (usage error when neither)."""
    config = args.config_opt or args.config
    if not config:
        parser.error("the Experiment YAML is required (CONFIG or --config FILE)")
    return str(config)


def plan_or_run(dry_run: bool, plan: Callable[[], dict[str, Any]], run: Callable[[], None]) -> int:
    """Print ``plan()`` as JSON (``dry_run``) or ``run()``; exit code 0, or 2 with one line on
    stderr when the spec or the pod's environment is refused."""
    try:
        if dry_run:
            print(json.dumps(plan(), indent=2, default=str))
        else:
            run()
    except ValueError as e:  # the spec, or the pod's environment, is wrong: say which
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
