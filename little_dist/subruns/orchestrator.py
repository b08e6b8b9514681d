"""The orchestrator role in process: :func:`run_orchestration` and upstream's three tools.

An orchestrator is a model that composes several defined workflows at run time through
upstream's tools (``orchestrator.ts``):

* ``plan_workflow {workflowId, input}`` -> ``{workflowVersionId}``: plan (or reuse) a
  WorkflowVersion of one workflow for a representative input;
* ``run_workflow {workflowVersionId, input}``: run a planned version on a structure-compatible
  input (upstream's ``structure`` reuse policy, :mod:`little_dist.planner.reuse`), as a
  sub-run;
* ``start_workflow {workflowId, input}``: plan, then run, in one call (the result also
  carries ``workflowVersionId``).

:func:`run_orchestration` runs the orchestrator as a run of its own: a generated workflow
(id ``orchestrator`` unless ``id=``) with one ``ai.generate`` step, ``orchestrate``, whose
model is offered the three tools and is told the available workflows (upstream's snapshots:
id, description, input and output schemas, definition hash, sorted by id). Its session is
therefore durable as any step is: model turns and tool results are memoized, and every
``run_workflow`` / ``start_workflow`` call is a sub-run (:mod:`little_dist.subruns.engine`)
whose id is derived from the call — a resumed orchestrator replays finished calls and finds,
never restarts, a child that was running. A ``plan_workflow`` call's planner session is
recorded on a run of its own (``run_plan_...``, derived from the call the same way: the
planner's tokens are paid once and show in the orchestrator's report as a sub-run).

Results, as upstream gives them (``workflowRunToolResultForCaller``): ``{runId, status,
output}``, or ``{runId, status, error: {message}}`` when the child failed (a failed child is
a result the model reads, not a tool error). When the calling model has bash (upstream's
orchestrator always has its result store), a completed child's output is not inline: it is
written to the attempt's own scratch and the model gets ``outputPath``
(``/mnt/scratch/own/workflow-results/<runId>/output.json``, pretty-printed JSON, readable
with bash) and ``outputSummary`` (``kind``, ``itemCount`` or ``fieldCount`` + ``fields``
(first 20), ``sizeBytes``, ``sha256``). Upstream has no size threshold: every output goes
to the file. The file is published with the step's scratch when it completes (a later
step's bash reads it under ``/mnt/scratch/peer-steps/<step>/workflow-results/``) and is
written again from the child's log when a retried attempt replays the call. Unknown ids are
tool errors with upstream's messages (``Unknown workflow id 'x'.``, ``Unknown
workflowVersionId 'x'.``).

``max_concurrent_sub_runs`` (upstream's ``maxConcurrentSubRuns``, default 10, an integer
>= 1) bounds the sub-runs running at once across the orchestrator's calls: further calls
wait for a place (upstream's concurrency gate), none is refused.

On a fleet worker (the harness context has a ``sub_runs`` host) no call waits in the
worker's thread: ``run_workflow`` and ``start_workflow`` start their child on the fleet and
the attempt suspends (:func:`~little_dist.subruns.engine.start_elsewhere`, with the planned
version and the pipeline store); a resumed attempt replays the turn and takes the results.
The gate is kept without a thread: a call made while ``max_concurrent_sub_runs`` of its
turn's children run is held back (nothing recorded, nothing started), and the attempt
suspends with ``resumeOn: "any"``, due again at the first of those children's end, when
the replayed turn starts the held-back calls' children in order
(:meth:`_Orchestration.run_on_fleet`). :func:`orchestrator_workflow` is the orchestrator as
a workflow an app module defines, so that a fleet's registry knows it (and, through its
tools' ``sub_run_workflows``, the workflows they run) and a client submits it.

Memory, as upstream mounts it for an orchestrating session (:func:`with_orchestrator_memory`):
with ``bash=`` the orchestrator's model is offered the bash tool and sees
``/mnt/memory/pipeline/`` (``rw``: the store of this set of workflows, keyed by their
definition hashes, so the next orchestration of the same workflows reads what this one
wrote), ``/mnt/memory/org/`` read-only and ``/mnt/memory/available-workflows/<key>/``
read-only, each available workflow's own memory (:mod:`little_dist.memory.layout`). The
sub-runs the tools start see that pipeline store read-only at ``/mnt/memory/pipeline/``
(upstream's ``pipelineWorkflowDefinitionHashes`` with mode ``ro``), with or without the
orchestrator's ``bash=``: it is recorded in each child's ``RunStarted``, so the child's
attempts mount it wherever they run (:mod:`little_dist.runtime.inherited`).

Not yet: a ``plan_workflow`` / ``start_workflow`` call plans in the worker's thread (on its
planning run, once: a resumed attempt takes the planned version from its log).
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

from little_dist import occurrences
from little_dist.canonical import sha256_digest
from little_dist.errors import InvalidInputError, LittleError
from little_dist.harness.bash_tool import OWN_SCRATCH
from little_dist.ids import PLAN_RUN_ID_PREFIX
from little_dist.memory.layout import pipeline_store_id
from little_dist.sandbox.writable import WritableFolder
from little_dist.subruns.engine import await_sub_run, call_key_of, child_spent
from little_dist.subruns.links import SUB_RUN_ENDED, SUB_RUN_STARTED
from little_dist.tools import InvalidToolInputError, Tool

if TYPE_CHECKING:
    from little_dist.authoring.definition import WorkflowDefinition
    from little_dist.authoring.results import RunResult
    from little_dist.compiler import WorkflowVersion
    from little_dist.harness.tool_calls import ToolCallInfo
    from little_dist.harness.types import Harness, HarnessContext, HarnessRole
    from little_dist.sandbox.bash_capabilities import BashCapabilities
    from little_dist.subruns.engine import SubRunHost, SubRunOutcome
    from little_dist.world.base import World

__all__ = [
    "DEFAULT_MAX_CONCURRENT_SUB_RUNS",
    "OrchestrationError",
    "orchestrator_tools",
    "orchestrator_workflow",
    "output_summary",
    "run_orchestration",
    "with_orchestrator_memory",
    "workflow_snapshots",
]

DEFAULT_MAX_CONCURRENT_SUB_RUNS: Final = 10

_ANY_INPUT: Final[dict[str, Any]] = {}  # JSON Schema that accepts any value
_OBJECT_INPUT: Final[dict[str, Any]] = {"type": "object"}


class OrchestrationError(LittleError):
    """A ``plan_workflow`` / ``run_workflow`` / ``start_workflow`` call that cannot proceed
    (an unknown id, planning that failed): the tool call's error."""

    def __init__(self, message: str, *, cause_code: str = "tool_error") -> None:
        super().__init__(message)
        self.cause_code = cause_code
        self.retriable = False


def workflow_snapshots(workflows: Sequence[WorkflowDefinition]) -> list[dict[str, Any]]:
    """What the orchestrator is told about each workflow, sorted by id (upstream's
    ``workflowSnapshotsForOrchestrator``)."""
    return [
        {
            "id": wf.id,
            "description": wf.description or "",
            "inputSchema": wf.input_schema,
            "outputSchema": wf.output_schema,
            "workflowDefinitionHash": wf.definition_hash(),
        }
        for wf in sorted(workflows, key=lambda item: item.id)
    ]


def output_summary(output: Any) -> dict[str, Any]:
    """Upstream's ``outputSummary`` of a sub-run's output (the model's compact view)."""
    text = json.dumps(output, ensure_ascii=False, indent=2) + "\n"
    summary: dict[str, Any] = {"sizeBytes": len(text.encode("utf-8"))}
    if isinstance(output, list):
        summary = {"kind": "array", "itemCount": len(output), **summary}
    elif isinstance(output, dict):
        fields = sorted(output)
        summary = {"kind": "object", "fieldCount": len(fields), "fields": fields[:20], **summary}
    else:
        kinds = {str: "string", bool: "boolean", int: "number", float: "number"}
        kind = "null" if output is None else kinds.get(type(output), "unknown")
        summary = {"kind": kind, **summary}
    summary["sha256"] = sha256_digest(output)
    return summary


def _tool_result(outcome: SubRunOutcome, info: ToolCallInfo) -> dict[str, Any]:
    """The result as upstream gives it to its caller (``workflowRunToolResultForCaller``):
    a ``tool.call`` step (caller ``code``) gets ``{runId, status, output?, error?}``; a model
    whose step has bash gets the output written to its scratch, as ``outputPath`` plus
    ``outputSummary``; a model without bash (no result store) gets the output inline."""
    result: dict[str, Any] = {"runId": outcome.child_run_id, "status": outcome.status}
    if outcome.status == "completed":
        result["output"] = outcome.output
    else:
        result["error"] = {"message": outcome.message or "Workflow run failed."}
    own = model_result_store(info.ctx) if info.turn is not None else None
    if own is None or "output" not in result:
        return result
    path, summary = write_model_facing_output(own, outcome.child_run_id, result.pop("output"))
    return {**result, "outputPath": path, "outputSummary": summary}


#: Where a model-facing sub-run output is written: the attempt's own scratch, as upstream's
#: orchestrator's result store (``mountDir: "/mnt/scratch/own/workflow-results"``).
RESULTS_DIR: Final = "workflow-results"


def model_result_store(ctx: Any) -> Path | None:
    """The host folder of the attempt's ``/mnt/scratch/own`` when its model has bash."""
    bash = ctx.tools.get("bash") if isinstance(ctx.tools, Mapping) else None
    own_folder = getattr(bash, "own_folder", None)
    return Path(own_folder()) if callable(own_folder) else None


def _segment(run_id: str) -> str:
    # upstream's safePathSegment: encodeURIComponent, and "." escaped too
    return quote(run_id, safe="-_!~*'()").replace(".", "%2E")


def write_model_facing_output(own: Path, run_id: str, output: Any) -> tuple[str, dict[str, Any]]:
    """Write ``output`` to ``own/workflow-results/<runId>/output.json`` (pretty JSON, as
    upstream) and return its path as the model's bash sees it, with its summary."""
    return write_output_file(own, run_id, output), output_summary(output)


def write_output_file(own: Path, run_id: str, output: Any) -> str:
    """Write ``output`` to ``own/workflow-results/<runId>/output.json`` (pretty JSON, as
    upstream's result store) and return the path the model's bash reads it at."""
    segment = _segment(run_id)
    text = json.dumps(output, ensure_ascii=False, indent=2) + "\n"
    # own/ is the model's: whatever its commands left on this path (a link out, a FIFO, a
    # file where a folder goes) is removed, never followed (little_dist.sandbox.writable)
    with WritableFolder(own) as folder:
        folder.write(f"{RESULTS_DIR}/{segment}/output.json", text.encode("utf-8"), clear_way=True)
    return f"{OWN_SCRATCH}/{RESULTS_DIR}/{segment}/output.json"


def rewrite_output_file(value: Any, ctx: Any) -> None:
    """Write again the output file a memoized call's result names (``outputPath``): a
    retried attempt's scratch starts from the last completed one's; read from the child's
    log."""
    if not isinstance(value, Mapping) or not isinstance(value.get("outputPath"), str):
        return
    own = model_result_store(ctx)
    child = value.get("runId")
    if own is None or not isinstance(child, str):
        return
    from little_dist.run_state import materialize_run_state

    world = ctx.recorder.world
    state = materialize_run_state(world.list_events(child), run_id=child)
    if state.status == "completed":
        write_output_file(own, child, state.output)


class _Orchestration:
    """The state the three tools share: the workflows, the gate, the planned versions."""

    def __init__(
        self,
        workflows: Sequence[WorkflowDefinition],
        *,
        harness: Harness | Mapping[HarnessRole, Harness] | None,
        max_concurrent_sub_runs: int,
    ) -> None:
        limit = max_concurrent_sub_runs
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidInputError(
                "run_orchestration: maxConcurrentSubRuns must be an integer >= 1."
            )
        self.by_id: dict[str, WorkflowDefinition] = {}
        for wf in workflows:
            if wf.id in self.by_id:
                raise InvalidInputError(f"run_orchestration: duplicate workflow id '{wf.id}'.")
            self.by_id[wf.id] = wf
        self.by_hash = {wf.definition_hash(): wf for wf in reversed(list(workflows))}
        self.harness = harness
        #: The orchestration's pipeline memory store, mounted read-only in its sub-runs.
        self.pipeline_store = pipeline_store_id(wf.definition_hash() for wf in workflows)
        self.limit = limit
        self.gate = threading.BoundedSemaphore(limit)
        #: On a fleet worker, per attempt (its recorder): the model turn and how many of
        #: its calls wait for a running child (the gate there; see :meth:`run_on_fleet`).
        self.open_calls: weakref.WeakKeyDictionary[Any, tuple[int | None, int]] = (
            weakref.WeakKeyDictionary()
        )
        self.planned: dict[str, tuple[WorkflowDefinition, WorkflowVersion]] = {}
        self.lock = threading.Lock()

    def workflow(self, workflow_id: Any) -> WorkflowDefinition:
        found = self.by_id.get(workflow_id) if isinstance(workflow_id, str) else None
        if found is None:
            raise OrchestrationError(f"Unknown workflow id '{workflow_id}'.")
        return found

    def checked_input(self, name: str, wf: WorkflowDefinition, value: Any) -> Any:
        from little_dist.authoring.errors import InputValidationError
        from little_dist.settings import load_limits

        try:
            return wf.validate_input(value, limits=load_limits())
        except InputValidationError as error:
            problems = [
                (f"input{path[5:]}" if path.startswith("input") else path, msg)
                for path, msg in error.problems
            ]
            raise InvalidToolInputError(name, problems) from error
        except InvalidInputError as error:
            raise InvalidToolInputError(name, [("input", str(error))]) from error

    # -- plan_workflow ------------------------------------------------------------------------

    def plan(self, info: ToolCallInfo, wf: WorkflowDefinition, run_input: Any) -> WorkflowVersion:
        """Plan (or reuse) a version of ``wf`` for ``run_input`` on the call's planning run."""
        from little_dist.planner import resolve_version
        from little_dist.run_state import materialize_run_state

        recorder = info.ctx.recorder
        key = call_key_of(info)
        plan_run = f"{PLAN_RUN_ID_PREFIX}{key.split(':', 1)[-1][:32]}"
        base = {"parentRunId": info.ctx.run_id, "childRunId": plan_run}
        planned = info.ctx.memo.sub_run_end(plan_run)
        if planned is not None and planned.get("status") == "planned":
            # A resumed attempt (its start_workflow call suspended): planned already.
            return self.version(recorder.world, planned.get("workflowVersionId"))[1]
        recorder.append(
            SUB_RUN_STARTED,
            {
                **base,
                "workflowId": wf.id,
                "toolName": info.tool_name,
                "toolCallId": info.call_id,
                "callKey": key,
                "stepPath": recorder.step_path,
                "attempt": recorder.attempt,
                "inputHash": sha256_digest(run_input),
                "disposition": "plan",
            },
            occurrences.sub_run_started(plan_run),
            durable=True,
        )
        world: World = recorder.world
        capabilities = wf.capabilities(self.harness)
        if info.ctx.budgeted:  # (the planning run's planner borrows from this run's budget)
            import dataclasses

            from little_dist.budgets import budget_event

            world.append(plan_run, budget_event(None, info.ctx.run_id))
            fallback = info.ctx.pricing_fallback
            capabilities = dataclasses.replace(capabilities, pricing_fallback=fallback)
        version = resolve_version(world, plan_run, wf, run_input, capabilities=capabilities)
        if version is None:
            state = materialize_run_state(world.list_events(plan_run), run_id=plan_run)
            error = state.error if isinstance(state.error, Mapping) else {}
            message = str(error.get("message") or f"planning {wf.id!r} failed")
            recorder.append(
                SUB_RUN_ENDED,
                {
                    **base,
                    "status": "failed",
                    "causeCode": error.get("causeCode"),
                    "message": message,
                    **child_spent(info, plan_run),
                },
                occurrences.sub_run_ended(plan_run),
                durable=True,
            )
            raise OrchestrationError(message, cause_code="planner_validation_exhausted")
        recorder.append(
            SUB_RUN_ENDED,
            {
                **base,
                "status": "planned",
                "workflowVersionId": version.id,
                **child_spent(info, plan_run),
            },
            occurrences.sub_run_ended(plan_run),
            durable=True,
        )
        with self.lock:
            self.planned[version.id] = (wf, version)
        return version

    def version(self, world: World, version_id: Any) -> tuple[WorkflowDefinition, WorkflowVersion]:
        """A planned version and its workflow: planned in this process, or read back from
        the world and matched by its lock's definition hash (a resumed orchestrator)."""
        from little_dist.compiler import WorkflowVersion

        if isinstance(version_id, str):
            with self.lock:
                known = self.planned.get(version_id)
            if known is not None:
                return known
            try:
                version = WorkflowVersion.from_json(world.get_version(version_id))
            except LittleError:
                version = None
            wf = (
                None
                if version is None
                else self.by_hash.get(str(version.lock.get("workflowDefinitionHash")))
            )
            if version is not None and wf is not None:
                with self.lock:
                    self.planned[version_id] = (wf, version)
                return wf, version
        raise OrchestrationError(f"Unknown workflowVersionId '{version_id}'.")

    def run(
        self, info: ToolCallInfo, wf: WorkflowDefinition, version: WorkflowVersion, run_input: Any
    ) -> dict[str, Any]:
        from little_dist.planner.reuse import VersionReuseError, check_version_input

        try:
            # upstream's run_workflow runs a planned version under the "structure" policy
            check_version_input(version, "structure", run_input)
        except VersionReuseError as error:
            raise OrchestrationError(str(error)) from error
        host = info.ctx.sub_runs
        if host is not None:
            return self.run_on_fleet(info, wf, version, run_input, host)
        with self.gate:
            outcome = await_sub_run(
                info,
                wf,
                run_input,
                harness=self.harness,
                version=version,
                pipeline_store=self.pipeline_store,
            )
        return _tool_result(outcome, info)

    def run_on_fleet(
        self,
        info: ToolCallInfo,
        wf: WorkflowDefinition,
        version: WorkflowVersion,
        run_input: Any,
        host: SubRunHost,
    ) -> dict[str, Any]:
        """The call's sub-run on a fleet worker: started there, and the attempt suspends
        (:func:`~little_dist.subruns.engine.start_elsewhere`); its result once it ended.

        The gate without a thread: the calls of one model turn are made in order, and the
        turn's calls that wait for a running child are counted; a call whose child is not
        started yet, made while ``maxConcurrentSubRuns`` of them wait, is held back (its
        child is not started, nothing of it is recorded) and the attempt suspends with
        ``resumeOn: "any"``: it is due again at the first of the waited children's end,
        replays the turn from the memo (the ended children's results, the others still
        waiting) and starts the held-back children in order while places are free."""
        from little_dist.harness.errors import SubRunPending
        from little_dist.subruns.engine import child_run_id_for, start_elsewhere

        recorder = info.ctx.recorder
        with self.lock:
            turn, waiting = self.open_calls.get(recorder, (info.turn, 0))
            if turn != info.turn:
                turn, waiting = info.turn, 0
            self.open_calls[recorder] = (turn, waiting)
        if waiting >= self.limit and not info.ctx.memo.sub_run_started(child_run_id_for(info)):
            raise SubRunPending([], held=True)
        try:
            outcome = start_elsewhere(
                info,
                wf,
                run_input,
                host,
                pipeline_store=self.pipeline_store,
                version=version,
            )
        except SubRunPending:
            with self.lock:
                self.open_calls[recorder] = (turn, waiting + 1)
            raise
        return _tool_result(outcome, info)


class _OrchestratorTool(Tool):
    """One of the three tools; its calls go to the shared :class:`_Orchestration`."""

    def __init__(self, name: str, description: str, key: str, orchestration: _Orchestration):
        super().__init__(
            name,
            None,
            description=description,
            input_schema={
                "type": "object",
                "required": [key, "input"],
                "properties": {key: {"type": "string"}, "input": _ANY_INPUT},
            },
        )
        self.orchestration = orchestration

    @property
    def sub_run_workflows(self) -> tuple[WorkflowDefinition, ...]:
        """The workflows its calls run as sub-runs (a fleet's registry loads them)."""
        return tuple(self.orchestration.by_id.values())

    def call(self, arguments: Mapping[str, Any]) -> Any:
        raise InvalidInputError(f"tool {self.name!r} is called by an orchestrator's model only")

    def replayed_in_context(self, value: Any, ctx: HarnessContext) -> None:
        """A memoized call whose output was written to scratch: write it again."""
        rewrite_output_file(value, ctx)

    def call_in_context(self, arguments: Mapping[str, Any], info: ToolCallInfo) -> Any:
        args = self.validate(arguments)
        o = self.orchestration
        world = info.ctx.recorder.world
        if self.name == "run_workflow":
            wf, version = o.version(world, args["workflowVersionId"])
            return o.run(info, wf, version, o.checked_input(self.name, wf, args["input"]))
        wf = o.workflow(args["workflowId"])
        run_input = o.checked_input(self.name, wf, args["input"])
        version = o.plan(info, wf, run_input)
        if self.name == "plan_workflow":
            return {"workflowVersionId": version.id}
        return {"workflowVersionId": version.id, **o.run(info, wf, version, run_input)}


_DESCRIPTIONS: Final = {
    "plan_workflow": (
        "Plan one workflow for a representative input and return a workflowVersionId to run "
        "many times with run_workflow on inputs of the same shape.",
        "workflowId",
    ),
    "run_workflow": (
        "Run a workflowVersionId from plan_workflow on an input of the same shape as the one "
        "it was planned for; the run is a sub-run with its own log. Use start_workflow when "
        "the input's shape differs.",
        "workflowVersionId",
    ),
    "start_workflow": (
        "Plan and run a workflow for this input in one call.",
        "workflowId",
    ),
}


def orchestrator_tools(
    workflows: Sequence[WorkflowDefinition],
    *,
    harness: Harness | Mapping[HarnessRole, Harness] | None = None,
    max_concurrent_sub_runs: int = DEFAULT_MAX_CONCURRENT_SUB_RUNS,
) -> list[Tool]:
    """Upstream's ``plan_workflow``, ``run_workflow`` and ``start_workflow`` over
    ``workflows`` (see the module docstring), to offer any step's model."""
    shared = _Orchestration(
        workflows, harness=harness, max_concurrent_sub_runs=max_concurrent_sub_runs
    )
    return [
        _OrchestratorTool(name, description, key, shared)
        for name, (description, key) in _DESCRIPTIONS.items()
    ]


_SYSTEM: Final = (
    "You orchestrate workflows. Call them with the tools: plan_workflow once per workflow "
    "shape then run_workflow for each same-shaped input, or start_workflow for a one-off. "
    "When you have what the task needs, answer without calling a tool.\n"
    "Available workflows (JSON):\n"
)


def with_orchestrator_memory(
    orchestrator: WorkflowDefinition, workflows: Sequence[WorkflowDefinition]
) -> WorkflowDefinition:
    """``orchestrator`` mounting what an orchestrating session over ``workflows`` sees
    (:func:`~little_dist.memory.layout.orchestrator_memory_mounts`) instead of its own
    workflow memory."""
    import dataclasses

    from little_dist.memory.layout import orchestrator_memory_mounts

    mounts = orchestrator_memory_mounts((wf.id, wf.definition_hash()) for wf in workflows)
    return dataclasses.replace(orchestrator, memory_mounts=tuple(mounts))


def orchestrator_workflow(
    workflows: Sequence[WorkflowDefinition],
    *,
    model: Any,
    id: str = "orchestrator",
    input_schema: Any = _OBJECT_INPUT,
    output: Any = str,
    system: str | None = None,
    harness: Harness | Mapping[HarnessRole, Harness] | None = None,
    max_concurrent_sub_runs: int = DEFAULT_MAX_CONCURRENT_SUB_RUNS,
    bash: BashCapabilities | Mapping[str, Any] | None = None,
) -> WorkflowDefinition:
    """The orchestrator over ``workflows`` as a workflow of its own (what
    :func:`run_orchestration` runs; the arguments are its): one ``ai.generate`` step,
    ``orchestrate``, offered the three tools. Define it at the top level of an app module
    and a fleet runs it like any workflow: the workers' registry knows it and the workflows
    its tools run (their ``sub_run_workflows``), a client submits it by definition or id,
    and its tools' sub-runs suspend its step instead of waiting in a worker's thread."""
    from little_dist.authoring import define_workflow

    if not workflows:
        raise InvalidInputError("an orchestrator needs at least one workflow")
    tools = orchestrator_tools(
        workflows, harness=harness, max_concurrent_sub_runs=max_concurrent_sub_runs
    )
    instructions = _SYSTEM + json.dumps(workflow_snapshots(workflows), sort_keys=True)
    shell = define_workflow(id=id, input=input_schema, output=output, model=model)
    slot = next(iter(shell.models))
    step: dict[str, Any] = {
        "id": "orchestrate",
        "uses": "ai.generate",
        "with": {
            "model": slot,
            "prompt": "{{ input }}",
            "tools": [item.name for item in tools] + (["bash"] if bash is not None else []),
        },
        "output": (
            {"mode": "text"}
            if shell.output_schema == {"type": "string"}
            else {"mode": "object", "schema": shell.output_schema}
        ),
    }
    plan = {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": id, "version": "1.0.0"},
        "input": {"schema": shell.input_schema},
        "output": {"schema": shell.output_schema},
        "permissions": {"models": [slot], "tools": [item.name for item in tools]},
        "steps": [step],
    }
    orchestrator = define_workflow(
        id=id,
        input=input_schema,
        output=output,
        model=model,
        bash=bash,
        tools=tools,
        system=(system + "\n\n" if system else "") + instructions,
        plan=plan,
    )
    return with_orchestrator_memory(orchestrator, workflows)


def run_orchestration(
    workflows: Sequence[WorkflowDefinition],
    input: Any,
    *,
    model: Any,
    id: str = "orchestrator",
    input_schema: Any = _OBJECT_INPUT,
    output: Any = str,
    system: str | None = None,
    world: World | None = None,
    run_id: str | None = None,
    harness: Harness | Mapping[HarnessRole, Harness] | None = None,
    max_concurrent_sub_runs: int = DEFAULT_MAX_CONCURRENT_SUB_RUNS,
    bash: BashCapabilities | Mapping[str, Any] | None = None,
    budget_usd: float | None = None,
) -> RunResult:
    """Run an orchestrator model over ``workflows`` on ``input`` in this process (see the
    module docstring); returns the orchestrator run's result (its output is the model's
    final answer: text, or ``output``'s type/schema). ``input_schema`` (default: any
    object) is the orchestrator's input (a pydantic model, a type or a JSON Schema).

    ``model``: the orchestrator's model (a litellm string or ``model(...)``); ``system``:
    text put before the generated instructions; ``harness``: the sub-runs' harness;
    ``bash``: upstream's bash capabilities of the orchestrator (``{}`` for the defaults):
    given, its model also has the sandboxed bash tool, and sub-run outputs come to it as
    files in its scratch (``outputPath``) instead of inline. The workflow it runs is
    :func:`orchestrator_workflow`'s. ``budget_usd``: the orchestration's dollar ceiling,
    which its sub-runs and planning runs spend from too (:mod:`little_dist.harness.budget_tree`).
    """
    from little_dist.authoring.options import RunOptions
    from little_dist.in_process import run_in_process

    if not workflows:
        raise InvalidInputError("run_orchestration needs at least one workflow")
    orchestrator = orchestrator_workflow(
        workflows,
        model=model,
        id=id,
        input_schema=input_schema,
        output=output,
        system=system,
        harness=harness,
        max_concurrent_sub_runs=max_concurrent_sub_runs,
        bash=bash,
    )
    # The orchestrator's own run, on the in-process engine; its children are driven through
    # the sub-run host (await_sub_run), never through the public entry point.
    options = RunOptions(where="run_orchestration", budget_usd=budget_usd)
    return run_in_process(orchestrator, input, options, world=world, run_id=run_id)
