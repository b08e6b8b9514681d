"""What a finished run gives its caller: :class:`RunResult` (upstream's ``WorkflowRunResult``)
and :func:`run_result`, the result of an ended run's state under its workflow (its output
parsed by the workflow's output schema; :class:`RunFailedError` for a failed run)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from little_dist.authoring.errors import RunFailedError
from little_dist.errors import InvalidInputError, LittleError
from little_dist.pricing import UsageTotals

if TYPE_CHECKING:
    from little_dist.authoring.definition import WorkflowDefinition
    from little_dist.run_state import RunState

__all__ = ["RunResult", "run_result"]


@dataclass(frozen=True)
class RunResult:
    """A finished run: ``output`` (validated; a model instance for a pydantic output),
    ``usage`` (tokens and ``cost_usd``, ``None`` when unpriced) and the folded ``state``."""

    run_id: str
    status: str
    output: Any
    usage: UsageTotals
    state: RunState
    workflow_version_id: str | None


def _failure(definition: WorkflowDefinition, run_id: str, state: RunState) -> RunFailedError:
    error = state.error if isinstance(state.error, Mapping) else {}
    cause = error.get("causeCode")
    cause_code = cause if isinstance(cause, str) and cause else "step_failed"
    failed = [path for path, step in state.steps.items() if step.status == "failed"]
    step_path = error.get("stepPath")
    failed_step = step_path if isinstance(step_path, str) else (failed[-1] if failed else None)
    message = error.get("message")
    result = RunResult(
        run_id=run_id,
        status=state.status,
        output=state.output if state.has_output else None,
        usage=state.usage,
        state=state,
        workflow_version_id=state.workflow_version_id,
    )
    text = f"Run {run_id!r} of workflow {definition.id!r} failed ({cause_code})"
    if isinstance(message, str) and message:
        text += f": {message}"
    return RunFailedError(
        text,
        run_id=run_id,
        workflow_version_id=state.workflow_version_id or "uncompiled",
        cause_code=cause_code,
        error=error,
        failed_step_path=failed_step,
        result=result,
    )


def run_result(definition: WorkflowDefinition, run_id: str, state: RunState) -> RunResult:
    """The :class:`RunResult` of an ended run's state (its output parsed by the workflow's
    output schema); :class:`RunFailedError` for a failed run."""
    if state.status == "failed":
        raise _failure(definition, run_id, state)
    if state.status != "completed":
        raise LittleError(f"Run {run_id!r} stopped before it finished (status {state.status}).")
    import jsonschema

    output = state.output
    errors = list(jsonschema.Draft7Validator(definition.output_schema).iter_errors(output))
    if errors:
        raise InvalidInputError(
            f"Run {run_id!r}: recorded output does not match the output schema of "
            f"{definition.id!r}: {errors[0].message}"
        )
    return RunResult(
        run_id=run_id,
        status=state.status,
        output=definition.parse_output(output),
        usage=state.usage,
        state=state,
        workflow_version_id=state.workflow_version_id,
    )
