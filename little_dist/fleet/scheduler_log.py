"""The scheduler's log: one JSON object per line on the ``little.scheduler`` logger.

``{"event": "decision", "run": ..., ...}``: what the scheduler did (a decision that changed
something, a run finished, a run that could not be advanced), readable by people and by
``jq``. A traceback, when there is one, follows the line as the handler formats it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

__all__ = ["log_event", "logger"]

logger = logging.getLogger("little.scheduler")


def log_event(
    event: str,
    *,
    level: int = logging.INFO,
    exc_info: bool | BaseException = False,
    **fields: Any,
) -> None:
    """Log ``{"event": event, **fields}`` as one line (built only when ``level`` is on)."""
    if logger.isEnabledFor(level):
        line = json.dumps({"event": event, **fields}, separators=(",", ":"), default=str)
        logger.log(level, line, exc_info=exc_info)
