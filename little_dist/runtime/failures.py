"""Turn an exception into upstream's step error envelope ``{name, message, causeCode, retriable}``.

A harness (or a tool) may steer the envelope by raising an exception with ``cause_code``
and/or ``retriable`` attributes; otherwise the cause is ``step_failed`` and retriability
is ``False`` for bad input and unknown names (:class:`~little_dist.errors.InvalidInputError`,
:class:`~little_dist.errors.NotFoundError`) and ``True`` for any other exception: whether a
retry actually happens is ``decide``'s call (the step's retry budget, terminal causes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from little_dist import occurrences
from little_dist.errors import InvalidInputError, NotFoundError
from little_dist.events import EventInput
from little_dist.redaction import redact

__all__ = [
    "CAUSE_CANCELLED",
    "CAUSE_LEASE_EXPIRED",
    "CAUSE_RUNTIME_CONFIG",
    "CAUSE_STEP_FAILED",
    "CAUSE_STEP_SCHEMA",
    "CAUSE_TIMEOUT",
    "TERMINAL_CAUSES",
    "error_envelope",
    "step_failed",
    "step_suspended",
    "timeout_envelope",
]

CAUSE_STEP_FAILED: Final = "step_failed"
CAUSE_STEP_SCHEMA: Final = "step_schema_error"
CAUSE_RUNTIME_CONFIG: Final = "runtime_config_error"
CAUSE_CANCELLED: Final = "cancelled"
CAUSE_LEASE_EXPIRED: Final = "lease_expired"
#: A step attempt ran past its time limit (terminal, as upstream's ``timeout``).
CAUSE_TIMEOUT: Final = "timeout"

#: Causes that are never retried, whatever the envelope says (upstream's list).
TERMINAL_CAUSES: Final = frozenset(
    {
        "cancelled",
        "timeout",
        "capability_drift",
        "runtime_config_error",
        "step_schema_error",
        "max_visits_exceeded",
        "budget_exceeded",  # ours: the run's dollar budget cannot hold the next model call
        "daily_budget_exceeded",  # ours: an operator's daily ceiling of the call's key
    }
)

_MESSAGE_LIMIT = 4000


def error_envelope(
    error: BaseException | None = None,
    *,
    name: str | None = None,
    message: str | None = None,
    cause_code: str | None = None,
    retriable: bool | None = None,
) -> dict[str, Any]:
    """The ``StepFailed.error`` payload for ``error`` (explicit arguments win)."""
    if name is None:
        name = type(error).__name__ if error is not None else "StepError"
    if message is None:
        message = str(error) if error is not None else ""
    # Whatever raised it, no credential reaches the log (little_dist.redaction).
    message = redact(message.strip()) or name
    if len(message) > _MESSAGE_LIMIT:
        message = message[: _MESSAGE_LIMIT - 1] + "…"
    if cause_code is None:
        found = getattr(error, "cause_code", None)
        cause_code = found if isinstance(found, str) and found else CAUSE_STEP_FAILED
    if retriable is None:
        found = getattr(error, "retriable", None)
        if isinstance(found, bool):
            retriable = found
        else:
            # Bad input and unknown names do not get better by trying again.
            retriable = not isinstance(error, InvalidInputError | NotFoundError)
    if cause_code in TERMINAL_CAUSES:
        retriable = False
    envelope: dict[str, Any] = {
        "name": name,
        "message": message,
        "causeCode": cause_code,
        "retriable": retriable,
    }
    retry_after = getattr(error, "retry_after", None)
    if isinstance(retry_after, int | float) and 0 < retry_after < 86_400:
        # When the next attempt may start, counted from this end's recordedAt (ours: a quota
        # wait, see little_dist.scheduling.policy).
        envelope["retryAfterMs"] = math.ceil(retry_after * 1000)
    return envelope


def timeout_envelope(path: str, timeout: float) -> dict[str, Any]:
    """The error of an attempt of ``path`` that ran past its ``timeout`` (seconds)."""
    return error_envelope(
        name="StepTimeoutError",
        message=f"step {path!r} ran past its timeout of {timeout:g}s",
        cause_code=CAUSE_TIMEOUT,
    )


def step_failed(
    path: str, step: Mapping[str, Any], attempt: int, error: dict[str, Any]
) -> EventInput:
    """The ``StepFailed`` that ends attempt ``attempt`` of ``path`` with ``error``."""
    return EventInput(
        type="StepFailed",
        occurrence_id=occurrences.attempt_ended(path, attempt),
        payload={
            "stepPath": path,
            "stepId": step.get("id"),
            "attempt": attempt,
            "attemptId": f"attempt_{attempt}",
            "error": error,
        },
    )


def step_suspended(
    path: str,
    step: Mapping[str, Any],
    attempt: int,
    waiting_for: list[str],
    *,
    resume_on_any: bool = False,
) -> EventInput:
    """The ``little.step.suspended`` that ends attempt ``attempt`` of ``path`` waiting for the
    sub-runs ``waiting_for`` (same occurrence as the attempt's other ends: it ends once).
    ``resume_on_any``: the step is due again at the first of them to end
    (``resumeOn: "any"``: calls held back behind an orchestrator's gate start then); without
    it, once they all ended (the field absent, as before it existed)."""
    from little_dist.event_types.engine import STEP_SUSPENDED

    payload: dict[str, Any] = {
        "stepPath": path,
        "stepId": step.get("id"),
        "attempt": attempt,
        "attemptId": f"attempt_{attempt}",
        "waitingFor": list(dict.fromkeys(waiting_for)),
    }
    if resume_on_any:
        payload["resumeOn"] = "any"
    return EventInput(
        type=STEP_SUSPENDED,
        occurrence_id=occurrences.attempt_ended(path, attempt),
        payload=payload,
    )
