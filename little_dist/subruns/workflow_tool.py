"""Workflows as tools (upstream's ``asHarnessWorkflow``): :func:`as_tool`.

``as_tool(workflow)`` is a :class:`~little_dist.tools.Tool` named after the workflow (its
``id``, or ``name=``), described by its description, whose input schema is the workflow's
input schema (an input that is not an object is wrapped: the tool takes ``{"input": ...}``)
and whose result carries the workflow's output. Register it like any tool
(``define_workflow(tools=[as_tool(child)])``): an ``ai.generate`` step's model, a
``tool.call`` step or a ``code.run`` program calls it, and each call is a sub-run
(:mod:`little_dist.subruns.engine`).

What the caller gets for a completed child (``result=``, default ``"auto"``):

* a model (``auto`` or ``compact``): upstream's compact envelope, what its harness hands the
  calling model (``compactWorkflowExecution``): ``{"status": "completed", "runId",
  "outputSummary", "outputPath"?}``. ``outputSummary`` is the output rendered as text (a
  string as is, anything else as compact JSON), cut at 4,096 characters with upstream's
  ``…[truncated: N of M characters; the full value is recorded in run <id>]`` marker. When it
  was cut and the calling step's model has bash, the whole output is also written to the
  attempt's own scratch, where upstream's orchestrator keeps its results
  (``/mnt/scratch/own/workflow-results/<runId>/output.json``, pretty JSON), and
  ``outputPath`` names it: the model reads it with bash; the file is published with the
  step's scratch and written again when a retried attempt replays the call. (Upstream's
  ``asHarnessWorkflow`` never sets ``outputPath``; its durable host names an opaque result
  instead. An output that fits is answered exactly as upstream's inline adapter does.)
* code (``auto`` or ``inline``: a ``tool.call`` step, a ``code.run`` program), or a model
  with ``result="inline"``: the whole execution, as ``asHarnessWorkflow`` returns it
  (``HarnessCompletedWorkflowExecution``): ``{"protocolVersion": 1, "status": "completed",
  "runId", "output", "summary"}``, so a program or a later step can use the output's fields.
* ``result="compact"`` gives code the compact envelope too (without ``outputPath``).

Failed, cancelled:

* for a model: a tool *result*, upstream's compact envelope ``{"status": "failed"|
  "cancelled", "runId", "causeCode", "message", "outputSummary"?}``
  (:mod:`little_dist.subruns.envelope`; ``outputSummary`` says ``Failed at step '<path>'
  (<the run's cause>): <message>`` when a step failed), recorded as the call's
  ``harness.tool_call.succeeded``: the model reads why and decides, as upstream's does. The
  ``causeCode`` is upstream's (``workflow_failed``, ``timeout``, ``cancelled``,
  ``input_validation``);
* for code: the tool call fails (``harness.tool_call.failed``, :class:`SubRunFailedError`
  naming the child run, its cause and the failed step; not retriable: a retry of the
  parent's step would find the same ended child), so the step fails as a failed tool does.

Identity and mode (:mod:`little_dist.subruns.workflow_options`): ``definition_identity``
(upstream's ``definitionIdentity``; default the workflow's ``definition_hash()``) and
``execution_mode`` (``"inline"``, default, or ``"durable"``) are on the tool and recorded in
every call's ``little.subrun.started`` (``definitionIdentity``, ``executionMode``).

Bounds (upstream's ``workflowBudgets``, given per tool as upstream gives them per
acquisition: ``max_concurrent_workflow_runs``, default 10, and ``max_queued_workflow_runs``,
default 100, or ``workflow_budgets={"maxConcurrentWorkflowRuns": .., "maxQueuedWorkflowRuns":
..}``). In process a model's calls run one after the other, each to its child's end,
so neither is ever reached. On a fleet a model turn's calls start their children and wait
together (:mod:`little_dist.harness.ai_generate` counts them): a call made while
``max_concurrent_workflow_runs`` of the turn's children run is held back (nothing started,
nothing recorded; the attempt resumes at the first of their ends and the replayed turn
starts it then, in order), and a call that would make more than
``max_queued_workflow_runs`` wait is refused before anything is started, with upstream's
envelope (causeCode ``max_queued_workflow_runs``, the budget named in its message). A call
whose child was started before is past both bounds.

On a fleet worker (the harness context has a ``sub_runs`` host) the call does not wait: it
starts its child on the fleet and the attempt suspends until the child ended, then a later
attempt takes the child's end (:func:`~little_dist.subruns.engine.start_elsewhere`).

Arguments that break the input schema fail the call with ``tool_input_error`` naming each
offending field, before anything is recorded or started.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from little_dist.errors import InvalidInputError, LittleError
from little_dist.subruns.envelope import (
    DEFAULT_MAX_CONCURRENT_WORKFLOW_RUNS,
    DEFAULT_MAX_QUEUED_WORKFLOW_RUNS,
    MAX_WORKFLOW_OUTPUT_SUMMARY_CHARACTERS,
    completed_envelope,
    completed_execution,
    failed_envelope,
    failure_summary,
    output_fits,
    queue_overflow,
    summarize_workflow_output,
)
from little_dist.subruns.workflow_options import (
    check_definition_identity,
    check_execution_mode,
    check_result_shape,
    workflow_run_bounds,
)
from little_dist.tools import InvalidToolInputError, Tool

if TYPE_CHECKING:
    from little_dist.authoring.definition import WorkflowDefinition
    from little_dist.harness.tool_calls import ToolCallInfo
    from little_dist.harness.types import Harness, HarnessRole
    from little_dist.subruns.engine import SubRunOutcome

__all__ = [
    "MAX_WORKFLOW_OUTPUT_SUMMARY_CHARACTERS",
    "SubRunFailedError",
    "WorkflowTool",
    "as_tool",
    "summarize_workflow_output",
]


class SubRunFailedError(LittleError):
    """A workflow tool's sub-run ended failed or cancelled: the tool call's error.

    ``cause_code`` is upstream's workflow-tool cause; ``run_id`` the child run."""

    retryable = False

    def __init__(self, message: str, *, run_id: str, cause_code: str) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.cause_code = cause_code
        self.retriable = False


def _wraps(schema: Any) -> bool:
    """Whether the workflow's input is passed as ``{"input": ...}`` (not an object schema)."""
    return not (isinstance(schema, Mapping) and schema.get("type") == "object")


class WorkflowTool(Tool):
    """A defined workflow as a tool (see the module docstring); made by :func:`as_tool`."""

    #: Its call records its sub-run durably before starting it, and a retry takes the
    #: result again from the sub-run's recorded end: the call's own events need no round
    #: trip of their own (see :mod:`little_dist.harness.tool_calls`).
    records_lazily = True

    def __init__(
        self,
        workflow: WorkflowDefinition,
        *,
        name: str | None = None,
        description: str | None = None,
        harness: Harness | Mapping[HarnessRole, Harness] | None = None,
        max_workers: int = 4,
        max_concurrent_workflow_runs: int = DEFAULT_MAX_CONCURRENT_WORKFLOW_RUNS,
        max_queued_workflow_runs: int = DEFAULT_MAX_QUEUED_WORKFLOW_RUNS,
        workflow_budgets: Mapping[str, Any] | None = None,
        definition_identity: str | Mapping[str, Any] | None = None,
        execution_mode: str = "inline",
        result: str = "auto",
    ) -> None:
        self.workflow = workflow
        self.harness = harness
        self.max_workers = max_workers
        where = f"as_tool({workflow.id!r})"
        max_concurrent_workflow_runs, max_queued_workflow_runs = workflow_run_bounds(
            where, workflow_budgets, max_concurrent_workflow_runs, max_queued_workflow_runs
        )
        #: Upstream's ``definitionIdentity`` (default: the workflow's definition hash).
        self.definition_identity = check_definition_identity(
            where,
            workflow.definition_hash() if definition_identity is None else definition_identity,
        )
        #: Upstream's ``executionMode`` (``inline`` or ``durable``; see the module docs).
        self.execution_mode = check_execution_mode(where, execution_mode)
        #: The shape of a completed call's result: ``auto``, ``compact`` or ``inline``.
        self.result_shape = check_result_shape(where, result)
        for label, value, least in (
            ("max_concurrent_workflow_runs", max_concurrent_workflow_runs, 1),
            ("max_queued_workflow_runs", max_queued_workflow_runs, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise InvalidInputError(
                    f"as_tool({workflow.id!r}): {label} must be an integer >= {least}, "
                    f"got {value!r}"
                )
        self.max_concurrent_workflow_runs = max_concurrent_workflow_runs
        self.max_queued_workflow_runs = max_queued_workflow_runs
        self.wrapped = _wraps(workflow.input_schema)
        schema: dict[str, Any]
        if self.wrapped:
            inner = workflow.input_schema if isinstance(workflow.input_schema, Mapping) else {}
            schema = {
                "type": "object",
                "additionalProperties": False,
                "required": ["input"],
                "properties": {"input": dict(inner)},
            }
        else:
            schema = dict(workflow.input_schema)
        #: The workflow's output schema: what ``output`` holds in a completed call's result.
        self.output_schema: Any = workflow.output_schema
        text = description if description is not None else workflow.description
        super().__init__(
            name if name is not None else workflow.id,
            None,
            description=text or f"Run the workflow {workflow.id!r} as a sub-run.",
            input_schema=schema,
        )

    @property
    def sub_run_workflows(self) -> tuple[WorkflowDefinition, ...]:
        """The workflow its calls run as sub-runs (a fleet's registry loads it)."""
        return (self.workflow,)

    def __repr__(self) -> str:
        return f"WorkflowTool({self.name!r}, workflow={self.workflow.id!r})"

    def identity(self) -> dict[str, Any]:
        """What every call's ``little.subrun.started`` records of the tool (upstream's
        names)."""
        return {
            "definitionIdentity": self.definition_identity,
            "executionMode": self.execution_mode,
        }

    def _completed(self, outcome: SubRunOutcome, info: ToolCallInfo) -> dict[str, Any]:
        """A completed child's result in the tool's shape for this caller (module docs)."""
        run_id, output = outcome.child_run_id, outcome.output
        shape = self.result_shape
        if shape == "auto":
            shape = "compact" if info.caller == "model" else "inline"
        if shape == "inline":
            return completed_execution(run_id, output)
        summary = summarize_workflow_output(output, run_id)
        path = None
        if info.caller == "model" and info.turn is not None and not output_fits(output):
            from little_dist.subruns.orchestrator import model_result_store, write_output_file

            own = model_result_store(info.ctx)
            if own is not None:
                path = write_output_file(own, run_id, output)
        return completed_envelope(run_id, summary, path)

    def replayed_in_context(self, value: Any, ctx: Any) -> None:
        """A memoized call whose large output was written to scratch: write it again."""
        from little_dist.subruns.orchestrator import rewrite_output_file

        rewrite_output_file(value, ctx)

    def call(self, arguments: Mapping[str, Any]) -> Any:
        raise InvalidInputError(
            f"tool {self.name!r} runs workflow {self.workflow.id!r} as a sub-run of the step "
            "that calls it; offer it to a step (define_workflow(tools=[...])) instead of "
            "calling it directly"
        )

    def run_input(self, arguments: Mapping[str, Any]) -> Any:
        """The workflow's run input from the call's arguments, checked against the input
        schema and the input limits; :class:`InvalidToolInputError` names what is wrong."""
        from little_dist.authoring.errors import InputValidationError
        from little_dist.limits import InputLimitError
        from little_dist.settings import load_limits

        checked = self.validate(arguments)
        value = checked["input"] if self.wrapped else checked
        try:
            return self.workflow.validate_input(value, limits=load_limits())
        except InputValidationError as error:
            raise InvalidToolInputError(self.name, error.problems) from error
        except InputLimitError as error:
            raise InvalidToolInputError(self.name, [("$", str(error))]) from error

    def call_in_context(self, arguments: Mapping[str, Any], info: ToolCallInfo) -> Any:
        """Run the workflow as a sub-run of the calling step (see the module docstring)."""
        from little_dist.harness.errors import SubRunPending
        from little_dist.subruns.engine import await_sub_run, child_run_id_for, start_elsewhere

        run_input = self.run_input(arguments)
        host = info.ctx.sub_runs
        if host is not None:
            # On a fleet worker: start the child there and suspend (or take its end), within
            # the bounds (a child started before is past them).
            child = child_run_id_for(info)
            if not info.ctx.memo.sub_run_started(child):
                refused = queue_overflow(
                    child,
                    info.in_flight,
                    info.queued,
                    self.max_concurrent_workflow_runs,
                    self.max_queued_workflow_runs,
                )
                if refused is not None:
                    return refused  # nothing was started
                if info.in_flight >= self.max_concurrent_workflow_runs:
                    raise SubRunPending([], held=True)  # waits for a place (resumeOn "any")
            outcome = start_elsewhere(
                info, self.workflow, run_input, host, identity=self.identity()
            )
        else:
            outcome = await_sub_run(
                info,
                self.workflow,
                run_input,
                harness=self.harness,
                max_workers=self.max_workers,
                identity=self.identity(),
            )
        if outcome.status == "completed":
            return self._completed(outcome, info)
        if info.caller == "model":
            return _failed_for_model(outcome)
        raise _failure(self.workflow.id, outcome)


def _failed_for_model(outcome: SubRunOutcome) -> dict[str, Any]:
    """Upstream's envelope of a child that failed or was cancelled (see the module docs)."""
    cause = outcome.cause_code or "workflow_failed"
    message = outcome.message or ""
    return failed_envelope(
        status=outcome.status,
        run_id=outcome.child_run_id,
        cause_code=cause,
        message=message,
        summary=failure_summary(
            outcome.child_run_id, outcome.failed_step_path, outcome.run_cause_code, message
        ),
    )


def _failure(workflow_id: str, outcome: SubRunOutcome) -> SubRunFailedError:
    where = f" at step {outcome.failed_step_path!r}" if outcome.failed_step_path is not None else ""
    detail = outcome.message or "Workflow run failed."
    message = (
        f"workflow {workflow_id!r} {outcome.status}{where} in sub-run {outcome.child_run_id} "
        f"({outcome.cause_code}): {detail}"
    )
    return SubRunFailedError(
        message, run_id=outcome.child_run_id, cause_code=outcome.cause_code or "workflow_failed"
    )


def as_tool(
    workflow: WorkflowDefinition,
    *,
    name: str | None = None,
    description: str | None = None,
    harness: Harness | Mapping[HarnessRole, Harness] | None = None,
    max_workers: int = 4,
    max_concurrent_workflow_runs: int = DEFAULT_MAX_CONCURRENT_WORKFLOW_RUNS,
    max_queued_workflow_runs: int = DEFAULT_MAX_QUEUED_WORKFLOW_RUNS,
    workflow_budgets: Mapping[str, Any] | None = None,
    definition_identity: str | Mapping[str, Any] | None = None,
    execution_mode: str = "inline",
    result: str = "auto",
) -> WorkflowTool:
    """``workflow`` as a typed tool whose every call is a sub-run (upstream's
    ``asHarnessWorkflow``). ``name`` defaults to the workflow's id, ``description`` to its
    description; ``harness`` is the sub-runs' harness (as ``run_workflow(harness=...)``);
    ``max_concurrent_workflow_runs`` / ``max_queued_workflow_runs`` (or upstream's names in
    ``workflow_budgets``): the workflow budgets; ``definition_identity`` /
    ``execution_mode``: upstream's ``definitionIdentity`` / ``executionMode``; ``result``:
    ``auto`` (upstream's compact envelope for a model, the whole execution for code),
    ``compact`` or ``inline`` (see the module docs)."""
    from little_dist.authoring.definition import WorkflowDefinition

    if not isinstance(workflow, WorkflowDefinition):
        raise InvalidInputError(
            f"as_tool expects a workflow from define_workflow(), got {type(workflow).__name__}"
        )
    return WorkflowTool(
        workflow,
        name=name,
        description=description,
        harness=harness,
        max_workers=max_workers,
        max_concurrent_workflow_runs=max_concurrent_workflow_runs,
        max_queued_workflow_runs=max_queued_workflow_runs,
        workflow_budgets=workflow_budgets,
        definition_identity=definition_identity,
        execution_mode=execution_mode,
        result=result,
    )
