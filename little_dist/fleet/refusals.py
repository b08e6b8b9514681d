"""Refusing a submission sent by name (``little.submit_run``) so that its sender learns why.

A service that sends ``little.submit_run`` by name reads no Celery result (the fleet keeps
none) and may have no Python: it learns what became of its submission from Redis (see
:mod:`little_dist.world.redis_s3.outcomes`). So every refusal is

* recorded for the sender: by the Celery task id, and under the run id when the submission
  has a usable one that is nobody's run (never touching a run that exists under it);
* raised as :class:`SubmissionRefused`, an expected error of the task (Celery's
  ``Task.throws``): the task ends FAILURE, not retried, logged in one line without a
  traceback, and Flower shows it.

The run id of a submission without one is derived from its task id (:func:`run_id_for`),
so a redelivered message finds the same run and the sender, who knows its task id, knows
the run id.

What a refusal names (``causeCode``):

===============================  =========================================================
``invalid_arguments``            an argument the task does not take (``workflow=``), more
                                 than four positional ones, neither or both of
                                 ``workflow_id`` and ``lwir``, a ``workflow_id`` that is no
                                 string or an ``lwir`` that is no JSON object
``invalid_run_id``               ``run_id`` is not ``run_`` + 1 to 80 of ``A-Za-z0-9_-``
                                 (or, without one, the task id makes no run id)
``unknown_workflow``             ``workflow_id`` is no workflow of the workers' app module
``invalid_input``                the input is not JSON or does not match the workflow's
                                 input schema
``over_limit``                   the input or the document is over a limit
                                 (``LITTLE_MAX_INPUT_BYTES``, ``LITTLE_MAX_JSON_DEPTH``, ...)
``invalid_workflow``             the LWIR document is invalid (its findings say why)
``capability_not_registered``    the document names a tool, model slot or harness its
                                 workflow does not register
``run_id_taken``                 the run id is another run's (another input or version)
``invalid_submission``           anything else the submission checks refuse
===============================  =========================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from little_dist.errors import InvalidInputError
from little_dist.ids import InvalidIdError, validate_run_id

__all__ = [
    "ARGUMENT_NAMES",
    "SubmissionRefused",
    "SubmitArguments",
    "cause_of",
    "run_id_for",
    "submit_arguments",
]

#: ``little.submit_run``'s arguments, in their positions.
ARGUMENT_NAMES: Final = (
    "workflow_id",
    "lwir",
    "input",
    "run_id",
    "budget_usd",
    "deadline",
    "timeout",
    "max_attempts",
    "callback_url",
)
#: The longest message a refusal records (characters): LWIR findings can be many.
_MESSAGE_MAX: Final = 4000


class SubmissionRefused(InvalidInputError):
    """A ``little.submit_run`` task refused: ``cause`` (a code, see the module docstring),
    ``message`` (why, in one line) and the ``run_id`` it was recorded under when usable."""

    def __init__(self, cause: str, message: str, run_id: str | None = None) -> None:
        message = _one_line(message)
        super().__init__(f"{run_id or 'a submission'} refused ({cause}): {message}")
        self.cause = cause
        self.message = message
        self.run_id = run_id

    def __reduce__(self) -> tuple[Any, ...]:
        # A prefork pool's child hands the error to its parent pickled.
        return (type(self), (self.cause, self.message, self.run_id))

    def __repr__(self) -> str:
        # What Celery's log line and Flower's task page show.
        return f"SubmissionRefused({self})"


@dataclass(frozen=True)
class SubmitArguments:
    """``little.submit_run``'s arguments, checked: exactly one of ``workflow_id`` (a
    string) and ``lwir`` (a JSON object)."""

    workflow_id: str | None
    lwir: dict[str, Any] | None
    input: Any
    run_id: Any
    #: The run's dollar ceiling, checked (``None``: the workflow's own, if any).
    budget_usd: float | None = None
    #: The run's limits as sent (``deadline``, ``timeout``, ``max_attempts``; checked), see
    #: :mod:`little_dist.run_limits`.
    limits: dict[str, Any] = field(default_factory=dict)
    #: Where the run's end is POSTed, signed (checked; see :mod:`little_dist.fleet.callbacks`).
    callback_url: str | None = None

    @property
    def workflow(self) -> dict[str, Any] | str:
        """What is submitted: the LWIR document, or the workflow id."""
        if self.lwir is not None:
            return self.lwir
        assert self.workflow_id is not None
        return self.workflow_id


def given_run_id(args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """The ``run_id`` a message carries, wherever it is (``None``: none), before the other
    arguments are checked: a refusal of those is recorded under it when it is usable."""
    position = ARGUMENT_NAMES.index("run_id")
    if "run_id" in kwargs:
        return kwargs["run_id"]
    return args[position] if len(args) > position else None


def run_id_for(given: Any, task_id: str | None, make: Callable[[], str]) -> str:
    """The run id of a submission: ``given``, checked; without one, derived from the task
    id (``run_`` + the id: a redelivery finds the same run); without a task id either (a
    direct call), ``make()``. :class:`SubmissionRefused` (``invalid_run_id``) if unusable."""
    if given is not None:
        if not isinstance(given, str):
            raise SubmissionRefused(
                "invalid_run_id", f"run_id must be a string, got {type(given).__name__}"
            )
        try:
            return validate_run_id(given)
        except InvalidIdError as error:
            raise SubmissionRefused("invalid_run_id", str(error)) from error
    if task_id is None:
        return make()
    try:
        return validate_run_id(f"run_{task_id}")
    except InvalidIdError as error:
        raise SubmissionRefused(
            "invalid_run_id",
            f"no run_id given, and the task id {task_id!r} makes no run id (run_ + the task "
            "id must be 1 to 80 of A-Z a-z 0-9 _ -): give a run_id",
        ) from error


def submit_arguments(args: Sequence[Any], kwargs: Mapping[str, Any]) -> SubmitArguments:
    """The task's arguments, bound by name and position as its signature has them;
    :class:`SubmissionRefused` (``invalid_arguments``) for any other."""
    unknown = sorted(set(kwargs) - set(ARGUMENT_NAMES))
    if unknown:
        names = ", ".join(repr(name) for name in unknown)
        raise SubmissionRefused(
            "invalid_arguments",
            f"little.submit_run takes no argument {names} (it takes {', '.join(ARGUMENT_NAMES)})",
        )
    if len(args) > len(ARGUMENT_NAMES):
        raise SubmissionRefused(
            "invalid_arguments",
            f"little.submit_run takes at most {len(ARGUMENT_NAMES)} positional arguments "
            f"({', '.join(ARGUMENT_NAMES)}), got {len(args)}",
        )
    twice = sorted(name for name in ARGUMENT_NAMES[: len(args)] if name in kwargs)
    if twice:
        raise SubmissionRefused(
            "invalid_arguments", f"little.submit_run got {twice[0]!r} by position and by name"
        )
    bound = dict(zip(ARGUMENT_NAMES, args, strict=False)) | dict(kwargs)
    workflow_id, lwir = bound.get("workflow_id"), bound.get("lwir")
    if (workflow_id is None) == (lwir is None):
        raise SubmissionRefused(
            "invalid_arguments",
            "little.submit_run takes exactly one of workflow_id (a workflow of the workers' "
            f"app) and lwir (an LWIR document), got {'both' if workflow_id else 'neither'}",
        )
    if workflow_id is not None and not isinstance(workflow_id, str):
        raise SubmissionRefused(
            "invalid_arguments",
            f"workflow_id must be a string, got {type(workflow_id).__name__}",
        )
    if lwir is not None and not isinstance(lwir, dict):
        raise SubmissionRefused(
            "invalid_arguments",
            f"lwir must be an LWIR document (a JSON object), got {type(lwir).__name__}",
        )
    from little_dist.budgets import budget_usd
    from little_dist.fleet.callback_urls import check_callback_url
    from little_dist.run_limits import run_limits

    limits = {
        name: bound[name]
        for name in ("deadline", "timeout", "max_attempts")
        if bound.get(name) is not None
    }
    try:
        budget = budget_usd(bound.get("budget_usd"), "little.submit_run")
        run_limits(
            "little.submit_run",
            now=0.0,
            timeout=limits.get("timeout"),
            deadline=limits.get("deadline"),
            attempts=limits.get("max_attempts"),
        )
        callback = bound.get("callback_url")
        callback = None if callback is None else check_callback_url(callback, "callback_url")
    except InvalidInputError as error:
        raise SubmissionRefused("invalid_arguments", str(error)) from None
    return SubmitArguments(
        workflow_id, lwir, bound.get("input"), bound.get("run_id"), budget, limits, callback
    )


def cause_of(error: InvalidInputError) -> str:
    """The ``causeCode`` of a refusal the submission checks raised (see the table)."""
    from little_dist.authoring.errors import InputValidationError
    from little_dist.canonical import NonHashableValueError
    from little_dist.limits import InputLimitError
    from little_dist.local_runner import RunInputError, RunMismatchError
    from little_dist.lwir.findings import LwirValidationError
    from little_dist.runtime.capabilities import CapabilityError

    causes: tuple[tuple[type[InvalidInputError], str], ...] = (
        (SubmissionRefused, ""),
        (RunMismatchError, "run_id_taken"),
        (InvalidIdError, "invalid_run_id"),
        (InputLimitError, "over_limit"),
        (InputValidationError, "invalid_input"),
        (RunInputError, "invalid_input"),
        (NonHashableValueError, "invalid_input"),
        (LwirValidationError, "invalid_workflow"),
        (CapabilityError, "capability_not_registered"),
    )
    for kind, cause in causes:
        if isinstance(error, kind):
            return cause or getattr(error, "cause", "invalid_submission")
    return "invalid_submission"


def _one_line(message: str) -> str:
    line = " ".join(message.split())
    return line if len(line) <= _MESSAGE_MAX else line[: _MESSAGE_MAX - 3] + "..."
