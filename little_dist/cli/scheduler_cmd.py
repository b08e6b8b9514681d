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
from typing import Any

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
    from little_dist.fleet.scheduler import open_scheduler
    from little_dist.litellm_prices import use_litellm_prices_for_unknown_models
    from little_dist.settings import load_settings

    _configure_logging(args.loglevel)
    use_litellm_prices_for_unknown_models()
    settings = load_settings()
    scheduler = open_scheduler(settings, name=args.name)
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
