"""Times the log records (``recordedAt``) as numbers ``decide`` can add to: pure, no clock."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["epoch_ms"]


def epoch_ms(recorded_at: str) -> int | None:
    """Milliseconds since the epoch of an ISO 8601 time (``2026-12-05T22:14:42.123Z``; a time
    without an offset is UTC); ``None`` when it is not one."""
    try:
        when = datetime.fromisoformat(recorded_at)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)
