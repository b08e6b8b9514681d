"""The errors a run of an authored workflow raises: a bad input, a failed run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from little_dist.errors import InvalidInputError, LittleError

if TYPE_CHECKING:
    from little_dist.authoring.results import RunResult

__all__ = ["InputValidationError", "RunFailedError"]


class InputValidationError(InvalidInputError):
    """A run input that does not match the workflow's input schema.

    ``problems`` lists ``(path, message)`` pairs, paths rooted at ``input``.
    """

    def __init__(self, workflow_id: str, problems: list[tuple[str, str]]) -> None:
        self.workflow_id = workflow_id
        self.problems = problems
        details = "; ".join(f"{path}: {message}" for path, message in problems)
        super().__init__(f"workflow {workflow_id!r}: invalid input: {details}")


class RunFailedError(LittleError):
    """A run ended with ``RunFailed`` (upstream's ``RunFailedError``).

    ``cause_code`` is upstream's (``step_failed``, ``max_visits_exceeded``,
    ``planner_validation_exhausted``, ...); ``error`` is the recorded error envelope and
    ``result`` the failed run's :class:`RunResult` (its ``state`` has every step).
    """

    def __init__(
        self,
        message: str,
        *,
        run_id: str,
        workflow_version_id: str,
        cause_code: str,
        error: Mapping[str, Any],
        failed_step_path: str | None = None,
        result: RunResult | None = None,
    ) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.workflow_version_id = workflow_version_id
        self.cause_code = cause_code
        self.error = dict(error)
        self.failed_step_path = failed_step_path
        self.result = result
