"""A run's limits (upstream's run-level ``timeout`` and ``maxAttempts``, a deadline) and its
cancel handle.

Upstream's ``runWorkflow`` takes ``timeout`` (a wall-clock cap: a duration string such as
``'10m'``, ``'2h'``, ``'30s'``, ``'1500ms'``, or a number of milliseconds; past it the run
fails with causeCode ``timeout``) and ``maxAttempts`` (the attempts of a step that declares
no ``retry`` of its own; default 1). Here both are also options of ``define_workflow`` (a
run's own wins). A *deadline* is the same cap given as a point in time when the run is
submitted (a ``datetime``, an ISO 8601 time with its zone, or a duration from now such as
``'10m'``); past it the run fails with causeCode ``deadline_exceeded``. Both may be given:
the earlier one ends the run.

They are recorded in the run's log as the engine event ``little.run.limits`` (occurrence
``limits``, before the run's first step; the first one recorded stands, so a resumed run
keeps the deadline it started with)::

    {"deadlineAt": 1765000000000,      # Unix milliseconds, when the run ends at the latest
     "causeCode": "timeout",           # or "deadline_exceeded": how it ends then
     "timeoutMs": 600000,              # as given (upstream's timeout), when one was
     "maxAttempts": 3}                 # when one was given

Whoever drives the run (the in-process runner, the fleet's scheduler and its sweeps, a
worker moving the run on) reads the limits from the log; once the deadline has passed it
records ``little.run.cancel_requested`` with ``{reason, causeCode}`` (the cancel path: the
run's attempts in flight are told to stop, its sub-runs end with it), and ``decide`` fails
the run with that cause (see :func:`stop_error`). Pure apart from the clock
(:func:`deadline_from_now` takes ``now``).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from little_dist import occurrences
from little_dist.durations import duration_ms, is_duration
from little_dist.errors import InvalidInputError
from little_dist.event_types.engine import CANCEL_EVENT_TYPE, LIMITS_EVENT_TYPE
from little_dist.events import EventInput

__all__ = [
    "CAUSE_DEADLINE",
    "CAUSE_TIMEOUT",
    "CancelToken",
    "RunLimits",
    "cancel_error",
    "cancel_handle",
    "deadline_at",
    "deadline_cancel",
    "duration_ms",
    "iso_ms",
    "max_attempts",
    "requested_cancel",
    "run_limits",
    "stop_error",
    "timeout_ms",
]

CAUSE_TIMEOUT: Final = "timeout"
CAUSE_DEADLINE: Final = "deadline_exceeded"


def timeout_ms(value: Any, where: str) -> int | None:
    """Upstream's ``timeout`` checked: a duration string or a positive number of
    milliseconds (``None``: none)."""
    if value is None:
        return None
    if isinstance(value, str):
        return duration_ms(value, where, "timeout")
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidInputError(
            f"{where}: timeout must be a duration such as '10m' or a positive number of "
            f"milliseconds (upstream's unit), got {value!r}"
        )
    return math.ceil(value)


def max_attempts(value: Any, where: str) -> int | None:
    """Upstream's ``maxAttempts`` checked: a positive integer (``None``: the default, 1)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{where}: max_attempts must be an integer >= 1, got {value!r}")
    return value


def deadline_at(value: Any, where: str, *, now: float) -> int | None:
    """A deadline checked, as Unix milliseconds: a timezone-aware ``datetime``, a
    ``timedelta`` or duration string from ``now`` (Unix seconds), or an ISO 8601 time with
    its zone (``None``: none)."""
    if value is None:
        return None
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
        if seconds <= 0:
            raise InvalidInputError(f"{where}: deadline must be in the future, got {value!r}")
        return math.ceil((now + seconds) * 1000)
    if isinstance(value, str):
        text = value.strip()
        if is_duration(text):
            return math.ceil(now * 1000) + duration_ms(text, where, "deadline")
        try:
            value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInputError(
                f"{where}: deadline must be a duration from now such as '10m' or an ISO 8601 "
                f"time with its zone such as '2026-01-31T18:00:00Z', got {text!r}"
            ) from None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise InvalidInputError(
                f"{where}: deadline {value.isoformat()} has no time zone; give one "
                "(e.g. datetime.now(timezone.utc) + timedelta(minutes=10))"
            )
        return math.ceil(value.timestamp() * 1000)
    raise InvalidInputError(
        f"{where}: deadline must be a datetime, a timedelta or a string such as '10m', "
        f"got {value!r}"
    )


@dataclass(frozen=True)
class RunLimits:
    """A run's limits as its log records them (see the module docstring)."""

    deadline_at_ms: int | None = None
    cause_code: str = CAUSE_DEADLINE
    timeout_ms: int | None = None
    max_attempts: int | None = None

    def __bool__(self) -> bool:
        return self.deadline_at_ms is not None or self.max_attempts is not None

    def passed(self, now: float) -> bool:
        """Whether the deadline has passed at ``now`` (Unix seconds)."""
        return self.deadline_at_ms is not None and now * 1000 >= self.deadline_at_ms

    def seconds_left(self, now: float) -> float | None:
        return None if self.deadline_at_ms is None else self.deadline_at_ms / 1000 - now

    def event(self) -> EventInput:
        """The ``little.run.limits`` event recording these limits."""
        payload: dict[str, Any] = {}
        if self.deadline_at_ms is not None:
            payload["deadlineAt"] = self.deadline_at_ms
            payload["causeCode"] = self.cause_code
        if self.timeout_ms is not None:
            payload["timeoutMs"] = self.timeout_ms
        if self.max_attempts is not None:
            payload["maxAttempts"] = self.max_attempts
        return EventInput(type=LIMITS_EVENT_TYPE, occurrence_id=occurrences.LIMITS, payload=payload)

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> RunLimits:
        deadline = payload.get("deadlineAt")
        timeout = payload.get("timeoutMs")
        attempts = payload.get("maxAttempts")
        cause = payload.get("causeCode")
        return cls(
            deadline_at_ms=deadline if _whole(deadline) else None,
            cause_code=cause if cause in (CAUSE_TIMEOUT, CAUSE_DEADLINE) else CAUSE_DEADLINE,
            timeout_ms=timeout if _whole(timeout) else None,
            max_attempts=attempts if _whole(attempts) else None,
        )

    @classmethod
    def of_events(cls, events: Iterable[Any]) -> RunLimits:
        """The limits of a run's events (the first ``little.run.limits``; none without)."""
        for event in events:
            if event.type == LIMITS_EVENT_TYPE:
                return cls.from_payload(event.payload)
        return cls()


def _whole(value: Any) -> bool:
    return value.__class__ is int and value > 0


def run_limits(
    where: str,
    *,
    now: float,
    timeout: Any = None,
    deadline: Any = None,
    attempts: Any = None,
) -> RunLimits:
    """The limits of a run from its options, checked (``now``: Unix seconds): the earlier of
    ``now + timeout`` and ``deadline`` is the run's deadline."""
    limit_ms = timeout_ms(timeout, where)
    at = deadline_at(deadline, where, now=now)
    cause = CAUSE_DEADLINE
    if limit_ms is not None:
        by_timeout = math.ceil(now * 1000) + limit_ms
        if at is None or by_timeout <= at:
            at, cause = by_timeout, CAUSE_TIMEOUT
    return RunLimits(at, cause, limit_ms, max_attempts(attempts, where))


def iso_ms(ms: int) -> str:
    """Unix milliseconds as an ISO 8601 UTC time (``2026-01-31T18:00:00.000Z``)."""
    return (
        dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def stop_error(limits: RunLimits) -> dict[str, Any]:
    """The ``RunFailed`` error of a run whose deadline passed (upstream's ``TimeoutError``)."""
    if limits.cause_code == CAUSE_TIMEOUT and limits.timeout_ms is not None:
        message = f"Run exceeded its timeout of {limits.timeout_ms} ms."
    else:
        at = "" if limits.deadline_at_ms is None else f" {iso_ms(limits.deadline_at_ms)}"
        message = f"Run passed its deadline{at}."
    return {"name": "TimeoutError", "message": message, "causeCode": limits.cause_code}


def deadline_cancel(limits: RunLimits) -> EventInput:
    """The cancel request recorded once the run's deadline has passed."""
    error = stop_error(limits)
    return EventInput(
        type=CANCEL_EVENT_TYPE,
        occurrence_id=occurrences.CANCEL,
        payload={
            "requestedBy": "deadline",
            "reason": error["message"],
            "causeCode": error["causeCode"],
        },
    )


def cancel_error(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The ``RunFailed`` error a cancel request ends its run with: a deadline's (its
    ``causeCode`` ``timeout`` / ``deadline_exceeded``), else upstream's ``cancelled``."""
    cause = payload.get("causeCode")
    if cause in (CAUSE_TIMEOUT, CAUSE_DEADLINE):
        reason = payload.get("reason")
        message = reason if isinstance(reason, str) and reason else "Run passed its deadline."
        return {"name": "TimeoutError", "message": message, "causeCode": cause}
    return {"name": "AbortError", "message": "Run was cancelled.", "causeCode": "cancelled"}


class CancelToken:
    """A cancel handle for a run driven in this process (upstream's ``signal``):
    ``run_workflow(..., cancel=token)``, then ``token.cancel()`` from any thread. The run
    records ``little.run.cancel_requested`` (with the reason) and fails with causeCode
    ``cancelled``; its attempts in flight are told to stop at once (a model call in flight
    is not waited for), its sub-runs end with it. A ``threading.Event`` works as well.
    """

    __slots__ = ("_event", "reason")

    def __init__(self) -> None:
        import threading

        self._event = threading.Event()
        self.reason: str | None = None

    def cancel(self, reason: str | None = None) -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)


def cancel_handle(value: Any, where: str) -> Any:
    """``cancel=`` checked: a :class:`CancelToken`, or anything with ``is_set()`` (a
    ``threading.Event``); ``None``: none."""
    if value is None or callable(getattr(value, "is_set", None)):
        return value
    raise InvalidInputError(
        f"{where}: cancel must be a CancelToken or a threading.Event, got {value!r}"
    )


def requested_cancel(handle: Any, requested_by: str) -> EventInput:
    """The cancel request recorded for a cancelled handle."""
    payload: dict[str, Any] = {"requestedBy": requested_by}
    reason = getattr(handle, "reason", None)
    if isinstance(reason, str) and reason:
        payload["reason"] = reason
    return EventInput(type=CANCEL_EVENT_TYPE, occurrence_id=occurrences.CANCEL, payload=payload)
