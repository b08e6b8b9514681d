"""Harness errors and their envelope ``{name, message, causeCode, retriable}``.

::

    LittleError
    └── HarnessError                  carries ``cause_code`` and ``retriable``
        ├── ModelCallError            the provider failed (translated from litellm's types)
        ├── ToolCallError             a tool raised, or the model named a tool it may not use
        ├── StepSchemaError           output still invalid after self-repair
        ├── TurnLimitError            the tool loop ran out of turns
        ├── HarnessCancelled          the attempt was cancelled (lease lost, run cancelled)
        ├── CapabilityDriftError      a resumed session's capabilities changed (:mod:`.drift`)
        └── HarnessConfigError        cannot run as configured (``code.run``, wrong result kind)

Cause codes and retriability (the runtime reads the ``cause_code``/``retriable`` attributes):

==========================================  ======================  =========
what                                        causeCode               retriable
==========================================  ======================  =========
litellm RateLimitError                      ``model_rate_limited``  yes
connection, timeout, 5xx, unavailable       ``model_unavailable``   yes
authentication / permission denied          ``runtime_config_error`` no
bad request, context window, content policy ``model_error``         no
a tool raised (``tool.call`` step)          ``tool_error``          yes, unless the tool's
                                                                    error says otherwise
tool arguments invalid                      ``tool_input_error``    no
output invalid after self-repair            ``step_schema_error``   no
turn limit                                  ``max_turns_exceeded``  no
cancelled                                   ``cancelled``           no
resumed with other tools, models or skills  ``capability_drift``    no
``code.run`` in the default harness,        ``runtime_config_error`` no
unknown tool, wrong result kind
==========================================  ======================  =========

The test guard's errors (:mod:`little_dist.testing.guard`) are never translated: they
propagate as they are, so a test that tried to leave the machine fails loudly.
"""

from __future__ import annotations

from typing import Any

from little_dist.errors import InvalidInputError, LittleError, NotFoundError
from little_dist.redaction import redact

__all__ = [
    "HarnessCancelled",
    "HarnessConfigError",
    "HarnessError",
    "ModelCallError",
    "StepSchemaError",
    "SubRunPending",
    "ToolCallError",
    "TurnLimitError",
    "envelope_for",
    "model_error_from",
    "reraise_guard_error",
]


class HarnessError(LittleError):
    """A harness failure with upstream's ``causeCode`` and a retriable flag; ``retry_after``
    (seconds): the attempt after it should not start before then (recorded as the error's
    ``retryAfterMs``, an engine extension)."""

    cause_code: str = "step_failed"
    retriable: bool = True
    retry_after: float | None = None

    def __init__(
        self, message: str, *, cause_code: str | None = None, retriable: bool | None = None
    ) -> None:
        super().__init__(message)
        if cause_code is not None:
            self.cause_code = cause_code
        if retriable is not None:
            self.retriable = retriable

    def envelope(self) -> dict[str, Any]:
        """``{name, message, causeCode, retriable}``."""
        return {
            "name": type(self).__name__,
            "message": redact(str(self)) or type(self).__name__,
            "causeCode": self.cause_code,
            "retriable": self.retriable,
        }


class ModelCallError(HarnessError):
    cause_code = "model_error"
    retriable = False


class ToolCallError(HarnessError):
    cause_code = "tool_error"


class StepSchemaError(HarnessError):
    cause_code = "step_schema_error"
    retriable = False

    def __init__(self, message: str, findings: list[str]) -> None:
        super().__init__(message)
        self.findings = findings


class TurnLimitError(HarnessError):
    cause_code = "max_turns_exceeded"
    retriable = False


class HarnessCancelled(HarnessError):
    cause_code = "cancelled"
    retriable = False


class HarnessConfigError(HarnessError):
    cause_code = "runtime_config_error"
    retriable = False


class SubRunPending(BaseException):
    """Not a failure: tool calls of the attempt started sub-runs (``child_run_ids``) that run
    elsewhere (a fleet worker suspends instead of waiting: :mod:`little_dist.subruns`).

    A ``BaseException`` so that no handler meant for errors turns it into a tool's or a
    step's failure: the model loop lets the other calls of the same turn start theirs, then
    raises one for all of them, and the attempt commits ``little.step.suspended``."""

    def __init__(
        self, child_run_ids: list[str], starts: list[Any] | None = None, *, held: bool = False
    ) -> None:
        super().__init__(f"waiting for sub-runs {', '.join(child_run_ids) or '(held back)'}")
        self.child_run_ids = list(child_run_ids)
        #: Children to start before the attempt suspends (recorded in the parent's log, not
        #: submitted yet: the attempt submits them all at once; see little_dist.subruns).
        self.starts = list(starts or [])
        #: A call held back (an orchestrator's ``maxConcurrentSubRuns`` gate was full): it
        #: starts its child on a later attempt, due at the first of the others' end
        #: (``resumeOn: "any"``).
        self.held = held


# litellm exception class names (checked along the MRO, most specific first) -> cause.
_MODEL_CAUSES: dict[str, tuple[str, bool]] = {
    "RateLimitError": ("model_rate_limited", True),
    "Timeout": ("model_unavailable", True),
    "APITimeoutError": ("model_unavailable", True),
    "APIConnectionError": ("model_unavailable", True),
    "InternalServerError": ("model_unavailable", True),
    "ServiceUnavailableError": ("model_unavailable", True),
    "BadGatewayError": ("model_unavailable", True),
    "AuthenticationError": ("runtime_config_error", False),
    "PermissionDeniedError": ("runtime_config_error", False),
    "ContextWindowExceededError": ("model_error", False),
    "ContentPolicyViolationError": ("model_error", False),
    "BadRequestError": ("model_error", False),
    "NotFoundError": ("model_error", False),
    "UnprocessableEntityError": ("model_error", False),
}


def reraise_guard_error(exc: BaseException) -> None:
    """Re-raise the test guard's error if ``exc`` is one or wraps one (litellm wraps)."""
    try:
        from little_dist.testing.guard import NetworkGuardError
    except ImportError:  # pragma: no cover - the testing package ships with little_dist
        return
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, NetworkGuardError):
            raise current
        seen.add(id(current))
        current = current.__cause__ or current.__context__


def model_error_from(exc: BaseException, *, model: str) -> ModelCallError:
    """Translate a provider exception (litellm's types) into a :class:`ModelCallError`."""
    cause, retriable = "model_error", False
    for cls in type(exc).__mro__:
        found = _MODEL_CAUSES.get(cls.__name__)
        if found is not None:
            cause, retriable = found
            break
    else:
        # Not one of litellm's types: an unexpected failure in the client; trying again may help.
        cause, retriable = "model_error", True
    # Provider errors can echo the request: a key in its URL, its Authorization header.
    message = redact(f"model call to {model} failed: {type(exc).__name__}: {exc}")
    return ModelCallError(message, cause_code=cause, retriable=retriable)


def envelope_for(exc: BaseException) -> dict[str, Any]:
    """``{name, message, causeCode, retriable}`` for any exception."""
    if isinstance(exc, HarnessError):
        return exc.envelope()
    found = getattr(exc, "cause_code", None)
    cause = found if isinstance(found, str) and found else "step_failed"
    flag = getattr(exc, "retriable", None)
    retriable = (
        flag if isinstance(flag, bool) else not isinstance(exc, InvalidInputError | NotFoundError)
    )
    return {
        "name": type(exc).__name__,
        "message": redact(str(exc)) or type(exc).__name__,
        "causeCode": cause,
        "retriable": retriable,
    }
