"""``little scheduler [--name NAME]``: run the fleet's scheduler until SIGTERM/SIGINT.

Settings come from the environment (``little_dist.settings``): the world (``LITTLE_WORLD``,
a ``redis://`` URL, plus ``LITTLE_S3_*``), the broker, the signal stream and group, the
timeouts. Logs are JSON lines on stderr, one per decision that changed something.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from little_dist.fleet.scheduler import Scheduler
    from little_dist.settings import Settings

__all__ = ["register", "run"]

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def register(sub: Any, name: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help="run the fleet scheduler (folds events, decides, sends tasks)",
        description=(
            "Read the signal stream through the scheduler consumer group, decide what is "
            "ready in each signalled run and send one Celery task per ready step. Several "
            "schedulers share the work. Stops cleanly on SIGTERM or SIGINT."
        ),
    )
    parser.add_argument(
        "--name",
        default=None,
        metavar="NAME",
        help="consumer name in the signal group (default: HOSTNAME:PID)",
    )
    parser.add_argument(
        "--loglevel",
        "-l",
        default="INFO",
        type=str.upper,
        choices=_LEVELS,
        help="log level (default: INFO)",
    )
    return parser


class _JsonLines(logging.Formatter):
    """One JSON object per line: time, level, logger, then the record's own fields."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        try:
            fields = json.loads(message) if message.startswith("{") else {"message": message}
        except ValueError:
            fields = {"message": message}
        if not isinstance(fields, dict):
            fields = {"message": message}
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line = {
            "ts": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            **fields,
        }
        # RedactingFilter leaves a scrubbed traceback in exc_text and drops exc_info.
        if record.exc_text:
            line["exc"] = record.exc_text
        elif record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, separators=(",", ":"), default=str)


def _configure_logging(level: str) -> None:
    from little_dist.redaction import RedactingFilter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonLines())
    handler.addFilter(RedactingFilter())
    root = logging.getLogger("little")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def run(args: argparse.Namespace) -> int:
    from little_dist.fleet.interpreter_tuning import tune_gc_for_service
    from little_dist.fleet.observing import observe_scheduler
    from little_dist.settings import load_settings

    _configure_logging(args.loglevel)
    settings = load_settings()
    scheduler = _open_scheduler(settings, name=args.name)
    observe_scheduler(settings, scheduler)
    tune_gc_for_service()

    def stop(signum: int, frame: FrameType | None) -> None:
        scheduler.stop()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        scheduler.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        scheduler.close()
    return 0


def _open_scheduler(settings: Settings, *, name: str | None) -> Scheduler:
    """A :class:`Scheduler` wired from ``settings``: the fleet's world, the Celery app and a
    Redis client on the world's Redis (where the signal stream lives)."""
    import redis as redis_lib

    from little_dist.errors import InvalidInputError
    from little_dist.fleet.app import make_celery_app
    from little_dist.fleet.queue import CeleryQueue
    from little_dist.fleet.scheduler import Scheduler
    from little_dist.world.factory import fleet_world_spec, redis_url_of, world_from_settings

    spec = fleet_world_spec(settings)
    if not spec.startswith(("redis://", "rediss://", "unix://")):
        raise InvalidInputError(
            f"little scheduler needs a redis:// world (LITTLE_WORLD), got {spec!r}: the signal "
            "stream lives in Redis"
        )
    world = world_from_settings(settings)
    block_ms = 1000
    client = redis_lib.Redis.from_url(
        redis_url_of(spec),
        decode_responses=True,
        socket_timeout=block_ms / 1000 + 10,
        socket_connect_timeout=10,
        health_check_interval=30,
    )
    app = make_celery_app(settings)
    return Scheduler(
        settings,
        world=world,
        queue=CeleryQueue(app, settings),
        redis_client=client,
        name=name,
        block_ms=block_ms,
        owns_clients=True,
    )
