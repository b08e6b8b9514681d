"""Options and helpers shared by the subcommands that read or write a world."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from little_dist.errors import InvalidInputError, NotFoundError
from little_dist.world.base import RunNotFoundError, World

DEFAULT_DATA_DIR = ".little-workflow"


def add_world_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--world",
        metavar="SPEC",
        default=None,
        help="world to use: a directory, 'local:PATH', or a redis:// URL with LITTLE_S3_* set "
        "(default: $LITTLE_WORLD, else --data-dir)",
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        default=None,
        help=f"LocalWorld data directory (default: {DEFAULT_DATA_DIR})",
    )


def world_spec(args: argparse.Namespace) -> str:
    if args.world and args.data_dir:
        raise InvalidInputError("give either --world or --data-dir, not both")
    if args.world:
        return str(args.world)
    if args.data_dir:
        return str(args.data_dir)
    return os.environ.get("LITTLE_WORLD") or DEFAULT_DATA_DIR


def open_world_for_reading(args: argparse.Namespace) -> World:
    """Open the world named by the options without creating anything on disk."""
    from little_dist.world.factory import open_world

    spec = world_spec(args)
    if "://" not in spec and spec not in ("memory:", "memory"):
        directory = Path(spec.removeprefix("local:"))
        if not (directory / "events" / "events.db").is_file():
            raise NotFoundError(f"no world at {directory} (no events/events.db there)")
    return open_world(spec)


def open_world_for_writing(args: argparse.Namespace) -> World:
    from little_dist.world.factory import open_world

    return open_world(world_spec(args))


def outcome_word(status: str, error: object) -> str:
    """How a person names a run's status: ``cancelled`` for a run that failed because it was
    cancelled (the log says ``RunFailed`` with causeCode ``cancelled``), else ``status``."""
    if status == "failed" and isinstance(error, dict) and error.get("causeCode") == "cancelled":
        return "cancelled"
    return status


def require_run(world: World, run_id: str) -> int:
    """The run's last sequence; :class:`RunNotFoundError` for a run with no events."""
    from little_dist.ids import validate_run_id

    validate_run_id(run_id)
    last = world.last_sequence(run_id)
    if last == 0:
        raise RunNotFoundError(run_id)
    return last


def budget_dollars(text: str) -> float:
    """``--budget-usd``'s type: a positive finite number of dollars (argparse's one-line
    usage error otherwise)."""
    from little_dist.budgets import budget_usd

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of dollars, got {text!r}") from None
    try:
        budget = budget_usd(value, "--budget-usd")
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    assert budget is not None
    return budget
