"""What :func:`~little_dist.local_runner.run_version` checks before it runs anything: the
run input against the workflow's input schema, a given run id against the run it names; the
errors it raises; and how a new run id is made."""

from __future__ import annotations

import uuid
from typing import Any

from little_dist.canonical import canonical_json
from little_dist.compiler import WorkflowVersion
from little_dist.errors import (
    ConflictError,
    InvalidInputError,
    LittleError,
)
from little_dist.events import Event
from little_dist.ids import RUN_ID_PREFIX
from little_dist.run_state import RunState
from little_dist.runtime import (
    run_input_of,
)


class RunInputError(InvalidInputError):
    """The run input does not match the workflow's input schema; ``problems`` lists why."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("input does not match the workflow's input schema: " + "; ".join(problems))


class RunMismatchError(InvalidInputError):
    """An existing run id was given with another workflow version or another input."""


class RunnerBusyError(ConflictError):
    """Another runner holds the run and did not let go within the wait."""


class RunStalledError(LittleError):
    """``decide`` has nothing to run, nothing is running, and the run is not over."""


def new_run_id() -> str:
    """A fresh run id: ``run_`` + 32 hex digits (random)."""
    return RUN_ID_PREFIX + uuid.uuid4().hex


def check_run_input(version: WorkflowVersion, run_input: Any) -> None:
    """Raise :class:`RunInputError` unless ``run_input`` matches the LWIR input schema."""
    from little_dist.runtime.outputs import schema_problems

    spec = version.lwir.get("input")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        return
    try:
        canonical_json(run_input)
    except InvalidInputError as error:
        raise RunInputError([str(error)]) from error
    problems = schema_problems(schema, run_input)
    if problems:
        raise RunInputError(problems)


def _check_same_run(
    run_id: str,
    state: RunState,
    events: list[Event],
    version: WorkflowVersion,
    run_input: Any,
) -> None:
    recorded = state.workflow_version_id
    if recorded is not None and recorded != version.id:
        raise RunMismatchError(
            f"run {run_id} belongs to workflow version {recorded}, not {version.id}"
        )
    if any(event.type == "RunStarted" for event in events) and canonical_json(
        run_input_of(events)
    ) != canonical_json(run_input):
        raise RunMismatchError(f"run {run_id} was started with a different input")
