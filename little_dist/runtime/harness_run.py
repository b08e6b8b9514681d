"""The harness run of one attempt, and what ends it: the events a commit appends.

:func:`run_and_judge` is step 4 and the first half of step 5 of
:func:`~little_dist.runtime.execute_step_attempt` (see :mod:`.attempt`): resolve the step's
input, build the task and context for the role that runs it (the worker's harness, or the
fixer's for a ``fix_step`` attempt), with the tools it may call, the model slot it names and
a :class:`~little_dist.harness.memo.Memo` of the step's earlier events; run the harness;
then judge what came back: an exception, a result past the deadline or an output that
breaks the step's contract ends the attempt with ``StepFailed``, a harness that started
sub-runs to wait for (:class:`~little_dist.harness.errors.SubRunPending`) with
``little.step.suspended``, anything else with the completion events
(:func:`~little_dist.runtime.outputs.completion_events`). Nothing here
appends: the attempt commits what this returns.

Run scratch. An attempt whose model is offered bash gets the run's scratch
(:class:`~little_dist.scratch.AttemptScratch`), made on its first command from the run's
file events (one read of the log, paid only by attempts that run a command or replay one).
Each command's record carries the manifest of ``own`` after it, and a retried attempt that
replays recorded commands starts its live part (or its commit) from the last one's
(:mod:`little_dist.scratch.snapshots`). When the attempt completes, what its commands
changed in ``/mnt/scratch/own`` (``harness.file.*`` events and the files' bytes as
artifacts) is committed with ``StepCompleted``, ahead of it; a failed, timed-out or killed
attempt publishes nothing. Entries that are not regular files
(a symlink, a FIFO...) are not published: a warning on the ``little_dist.scratch`` logger
names each.

Memory. The same first command also mounts the workflow's memory stores
(:mod:`little_dist.memory`, from ``capabilities.memory_mounts``); a completing attempt that
still holds its step publishes their changes (compare-and-set per file, a conflict kept as a
copy) right before its commit, each store's commit fenced by the step lease (a zombie
attempt's is refused, atomically), and the events that say so go into the commit. The ``own``
manifest a command's record carries also holds, under ``memory``, each read-write store's
folder after the command and the versions it started from; a replay takes them up like
``own``'s, so the retry's commit publishes what the replayed commands wrote, from the
versions the recorded session saw (:mod:`little_dist.memory.attempt`).

Sub-runs. A sub-run's attempts run with what its ``RunStarted`` says it inherits
(:mod:`little_dist.runtime.inherited`: its parent's denies, an orchestration's pipeline
store read-only), applied to the capabilities here, whoever runs the attempt.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from little_dist.compiler import WorkflowVersion
from little_dist.errors import LeaseLostError, StorageUnavailableError
from little_dist.events import Event, EventInput
from little_dist.harness.errors import SubRunPending
from little_dist.memory.attempt import MemoryLimitError
from little_dist.memory.runtime import LazyMemory
from little_dist.run_state import RunState
from little_dist.runtime.capabilities import Capabilities, CapabilityError, RuntimeConfigError
from little_dist.runtime.dead_attempts import WORKER_STEP_KINDS
from little_dist.runtime.failures import (
    CAUSE_RUNTIME_CONFIG,
    CAUSE_STEP_SCHEMA,
    error_envelope,
    step_failed,
    step_suspended,
    timeout_envelope,
)
from little_dist.runtime.outputs import completion_events
from little_dist.scheduling import RunContext, StepDispatch
from little_dist.scheduling.context import StepLocation
from little_dist.scheduling.step_graph import (
    StepPlan,
    output_schema_hash,
    plan_for,
    step_output_error,
)
from little_dist.scratch.attempt import ScratchLimitError
from little_dist.world.base import ArtifactInput, World

if TYPE_CHECKING:
    from little_dist.harness.bash_tool import BashTool
    from little_dist.harness.recorder import EventRecorder
    from little_dist.harness.types import (
        ExecuteStepTask,
        FixStepTask,
        HarnessRole,
        ResolvedModel,
    )
    from little_dist.memory.layout import MemoryMountSpec
    from little_dist.sandbox import Mount
    from little_dist.scratch import AttemptScratch, Changes
    from little_dist.skills.descriptor import SkillDescriptor

__all__ = ["run_and_judge"]

_scratch_log = logging.getLogger("little_dist.scratch")


# Long on purpose: the attempt's way from its harness run to the events that end it, each
# way it can end (suspended, failed, timed out, invalid output, scratch or memory over its
# limits, completed) returned where it is found, inside the scratch and memory it holds.
def run_and_judge(
    world: World,
    dispatch: StepDispatch,
    *,
    where: StepLocation,
    version: WorkflowVersion,
    capabilities: Capabilities,
    state: RunState,
    context: RunContext,
    prior_events: Sequence[Event],
    recorder: EventRecorder,
    cancelled: Callable[[], bool],
    inline_limit: int,
    stage: list[ArtifactInput],
    deadline: float | None,
    timed_out: Callable[[], bool],
    timeout: float | None,
) -> list[EventInput]:
    """Run the harness and return the events that end the attempt (not yet appended); the
    small output artifact they name is added to ``stage`` (written with them). An attempt
    past its ``deadline`` fails with cause ``timeout`` whatever the harness made of it."""
    path, attempt = dispatch.step_path, dispatch.attempt
    step = where.step.raw
    if step.get("uses") not in WORKER_STEP_KINDS:
        error = error_envelope(
            name="RuntimeConfigError",
            message=f"step {path!r} uses {step.get('uses')!r}, which no worker executes",
            cause_code=CAUSE_RUNTIME_CONFIG,
        )
        return [step_failed(path, step, attempt, error)]
    if context.inherited is not None:
        from little_dist.runtime.inherited import with_inherited

        try:  # a sub-run: its parent's denies and pipeline store, as its log records them
            capabilities = with_inherited(capabilities, context.inherited)
        except RuntimeConfigError as exc:
            return [step_failed(path, step, attempt, _envelope(exc))]
    memory = LazyMemory(
        world,
        capabilities.memory_mounts,
        run_id=dispatch.run_id,
        step_path=path,
        attempt=attempt,
    )
    with memory, _Scratch(world, dispatch, memory=memory) as scratch:
        try:
            step_input = _step_input(context, state, path, step)
            output, artifact_refs = _run_harness(
                world,
                dispatch,
                step=step,
                visit_index=where.visit,
                step_input=step_input,
                version=version,
                capabilities=capabilities,
                state=state,
                prior_events=prior_events,
                recorder=recorder,
                cancelled=cancelled,
                deadline=deadline,
                scratch=scratch,
            )
        except (LeaseLostError, StorageUnavailableError):
            # Not the step's failure: the attempt stops without an end (see the module docs).
            raise
        except SubRunPending as pending:
            # Its calls started sub-runs that run elsewhere: the attempt ends waiting, once
            # the children its calls recorded are submitted (after those records are in the
            # log: a crash in between leaves them named, and a retry submits them again).
            if pending.starts:
                recorder.flush()
                capabilities.sub_runs.start_many(pending.starts)
            return [
                step_suspended(
                    path, step, attempt, pending.child_run_ids, resume_on_any=pending.held
                )
            ]
        except Exception as exc:  # the attempt fails; the runner and the log carry on
            from little_dist.harness.errors import reraise_guard_error

            reraise_guard_error(exc)
            if timeout is not None and (timed_out() or _past(deadline)):
                return [step_failed(path, step, attempt, timeout_envelope(path, timeout))]
            return [step_failed(path, step, attempt, _envelope(exc))]
        if timeout is not None and (timed_out() or _past(deadline)):
            # It returned, but too late: its result is not trusted more than a hung one's.
            return [step_failed(path, step, attempt, timeout_envelope(path, timeout))]
        problem = step_output_error(plan_for(version), where.step, output)
        if problem is not None:
            error = error_envelope(
                name="StepOutputValidationError", message=problem, cause_code=CAUSE_STEP_SCHEMA
            )
            return [step_failed(path, step, attempt, error)]
        try:
            published = scratch.changes()
        except ScratchLimitError as exc:
            return [step_failed(path, step, attempt, _envelope(exc))]
        staged_before = len(stage)
        stage.extend(published.artifacts)
        completed = completion_events(
            world,
            run_id=dispatch.run_id,
            step=step,
            step_path=path,
            attempt=attempt,
            output=output,
            artifact_refs=artifact_refs,
            schema_hash=_schema_hash(where.step),
            inline_limit=inline_limit,
            always_artifact=where.parallel is not None,
            stage=stage,
        )
        try:
            # Memory lands now, ahead of the commit that records it, and only while the
            # attempt holds its step: each store's commit checks the step lease's fence
            # atomically, so a zombie attempt publishes nothing (LeaseLostError: superseded).
            remembered = memory.publish(still_held=lambda: not cancelled(), fence=recorder.fence)
        except MemoryLimitError as exc:
            del stage[staged_before:]  # the failure publishes nothing of this attempt's
            return [step_failed(path, step, attempt, _envelope(exc))]
        for skipped in remembered.skipped:
            _scratch_log.warning(
                "run %s step %r attempt %d: memory entry %s",
                dispatch.run_id,
                path,
                attempt,
                skipped,
            )
        return [*published.events, *remembered.events, *completed]


def _step_input(context: RunContext, state: RunState, path: str, step: Mapping[str, Any]) -> Any:
    """What the harness gets as ``step_input``: the rendered prompt of an ``ai.generate`` step
    (the model's user message), else upstream's ``resolveStepInput``."""
    from little_dist.expressions import UNDEFINED
    from little_dist.step_context import resolve_step_config, resolve_step_input

    config = step.get("with")
    if step.get("uses") == "ai.generate" and isinstance(config, Mapping) and "prompt" in config:
        value = resolve_step_config(context, state, path).get("prompt")
    else:
        value = resolve_step_input(context, state, path)
    return None if value is UNDEFINED else value


def _envelope(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, RuntimeConfigError):
        return error_envelope(exc, cause_code=CAUSE_RUNTIME_CONFIG, retriable=False)
    from little_dist.harness.errors import envelope_for

    envelope = envelope_for(exc)
    # Re-normalized so engine rules (terminal causes never retry, bounded messages) hold
    # whatever a custom harness raised.
    return error_envelope(
        exc,
        name=str(envelope.get("name") or type(exc).__name__),
        message=str(envelope.get("message") or ""),
        cause_code=str(envelope.get("causeCode") or "step_failed"),
        retriable=bool(envelope.get("retriable", True)),
    )


def _run_harness(
    world: World,
    dispatch: StepDispatch,
    *,
    step: Mapping[str, Any],
    visit_index: int,
    step_input: Any,
    version: WorkflowVersion,
    capabilities: Capabilities,
    state: RunState,
    prior_events: Sequence[Event],
    recorder: EventRecorder,
    cancelled: Callable[[], bool],
    deadline: float | None,
    scratch: _Scratch,
) -> tuple[Any, tuple[str, ...]]:
    """Build the task and context for the step's role and run the chosen harness."""
    from little_dist.harness.memo import Memo
    from little_dist.harness.types import (
        ExecuteStepResult,
        FixStepResult,
        HarnessContext,
        HarnessScope,
    )

    path = dispatch.step_path
    task, role = _task_for(dispatch, step, visit_index, step_input, state)
    tools = _tools_for(step, version, capabilities)
    # The MCP servers' tools, listed now for the session manifest, and their guide skills
    # (little_dist.mcp.guides), offered with the workflow's.
    mcp, guides = _mcp_session(step, tools)
    skills = (*capabilities.skills, *guides)
    bash = _bash_tool(step, capabilities, tools, recorder, scratch, skills)
    if bash is not None:
        tools[bash.name] = bash
    if capabilities.skills and step.get("uses") != "tool.call":
        from little_dist.skills import restrict_tools

        tools = restrict_tools(tools, capabilities.skills)  # allowed-tools (little_dist.skills)
    ctx = HarnessContext(
        run_id=dispatch.run_id,
        role=role,
        model=_model_for(dispatch, step, capabilities),
        recorder=recorder,
        memo=Memo.from_events(prior_events, path, world=world),
        scope=HarnessScope(run_id=dispatch.run_id, role=role, step_path=path),
        system=capabilities.system,
        tools=tools,
        skills=skills,
        cancelled=cancelled,
        manifest=_manifest(
            dispatch,
            step=step,
            version=version,
            mcp=mcp,
            bash=bash,
            memory=capabilities.memory_mounts,
        ),
        max_turns=capabilities.max_turns,
        deadline=deadline,
        permissions=capabilities.permissions,
        # (the stores are mounted beside the bash tool's scratch: without bash, none)
        memory_mounts=capabilities.memory_mounts if bash is not None else (),
        sub_runs=capabilities.sub_runs,
        quotas=capabilities.quotas,
        quota_gave_back=_gave_back_for_quota(state, path, dispatch.attempt),
        budgeted=state.budget_tree,
        pricing_fallback=capabilities.pricing_fallback,
    )
    try:
        result = capabilities.harness_registry().run(task, ctx)
    finally:
        if bash is not None:
            bash.close()
    if isinstance(result, ExecuteStepResult):
        return result.output, tuple(result.artifact_refs)
    if isinstance(result, FixStepResult):
        return result.output, ()
    raise RuntimeConfigError(
        f"the {role} harness returned {type(result).__name__} for step {path!r}; "
        "expected ExecuteStepResult or FixStepResult"
    )


def _gave_back_for_quota(state: RunState, path: str, attempt: int) -> bool:
    """Whether the attempt before ``attempt`` gave its slot back for quota (``quota_wait``):
    this one, sent when the quota was expected, then waits for its turn in place instead of
    giving its slot back again (and going to the back of the line behind the calls that
    waited in place meanwhile)."""
    step = state.steps.get(path)
    if step is None or attempt < 2 or len(step.attempts) < attempt - 1:
        return False
    error = step.attempts[attempt - 2].error
    return isinstance(error, Mapping) and error.get("causeCode") == "quota_wait"


def _task_for(
    dispatch: StepDispatch,
    step: Mapping[str, Any],
    visit_index: int,
    step_input: Any,
    state: RunState,
) -> tuple[ExecuteStepTask | FixStepTask, HarnessRole]:
    """The harness task of the attempt, and the role whose harness runs it: the fixer for
    a ``fix_step`` attempt (with the error of the attempt it fixes), else the step's."""
    from little_dist.harness.types import (
        ExecuteStepTask,
        FixStepTask,
        StepContext,
        role_for_step,
    )

    path, attempt = dispatch.step_path, dispatch.attempt
    step_context = StepContext(step_path=path, visit_index=visit_index, attempt=attempt)
    if dispatch.kind != "fix_step":
        task = ExecuteStepTask(step=step, step_input=step_input, step_context=step_context)
        return task, role_for_step(step)
    step_state = state.steps.get(path)
    previous = step_state.attempts[-1] if step_state and step_state.attempts else None
    fix = FixStepTask(
        step=step,
        step_input=step_input,
        original_attempt_error=dict(previous.error or {}) if previous else {},
        prior_fix_attempts=max(0, attempt - 2),
        step_context=step_context,
    )
    return fix, "fixer"


def _model_for(
    dispatch: StepDispatch, step: Mapping[str, Any], capabilities: Capabilities
) -> ResolvedModel:
    """The model the attempt's harness gets: the ``ai.generate`` step's slot (the fixer's,
    for a ``fix_step`` attempt, when it names one), else none."""
    from little_dist.harness.types import NO_MODEL

    with_ = step.get("with") if isinstance(step.get("with"), Mapping) else {}
    assert isinstance(with_, Mapping)
    slot = with_.get("model") if step.get("uses") == "ai.generate" else None
    if dispatch.kind == "fix_step":
        fixer = (step.get("onFailure") or {}).get("fixer") or {}
        slot = fixer.get("model", slot)
    if isinstance(slot, str):
        return capabilities.resolve_model(slot)
    return NO_MODEL


def _tools_for(
    step: Mapping[str, Any], version: WorkflowVersion, capabilities: Capabilities
) -> dict[str, Any]:
    """The tools the step may call: the named one for ``tool.call``; else the allowlist."""
    with_ = step.get("with")
    if step.get("uses") == "tool.call" and isinstance(with_, Mapping):
        name = with_.get("tool")
        found = capabilities.tools.get(name) if isinstance(name, str) else None
        if found is None:
            raise CapabilityError(
                f"step {step.get('id')!r} calls tool {name!r}, which is not registered "
                f"(registered: {', '.join(capabilities.tools.names()) or 'none'})"
            )
        return {found.name: found}
    names = _named_tools(step, version)
    if names is not None:
        # A name the workflow does not register is refused, not quietly left out: the
        # document selects among the registered tools, it never adds one.
        tools = capabilities.tools
        for name in names:
            if not capabilities.offers_tool(name):
                raise CapabilityError(
                    f"step {step.get('id')!r} names tool {name!r}, which is not registered "
                    f"(registered: {', '.join(tools.names()) or 'none'})"
                )
    return capabilities.tools_for(names)


def _named_tools(step: Mapping[str, Any], version: WorkflowVersion) -> list[str] | None:
    """The step's ``with.tools``, else the workflow's ``permissions.tools``, else None."""
    with_ = step.get("with")
    if isinstance(with_, Mapping) and isinstance(with_.get("tools"), list):
        return [str(name) for name in with_["tools"]]
    permissions = version.lwir.get("permissions")
    if isinstance(permissions, Mapping) and isinstance(permissions.get("tools"), list):
        return [str(name) for name in permissions["tools"]]
    return None


def _bash_tool(
    step: Mapping[str, Any],
    capabilities: Capabilities,
    tools: Mapping[str, Any],
    recorder: EventRecorder,
    scratch: _Scratch,
    skills: Sequence[SkillDescriptor],
) -> BashTool | None:
    """This attempt's bash tool, when the workflow enables it and the step's model may be
    offered it (see :mod:`little_dist.harness.bash_tool`); else None."""
    if capabilities.bash is None or step.get("uses") == "tool.call" or "bash" in tools:
        return None
    # A step's own tools list limits it; permissions.tools (registered tools only: upstream's
    # compiler refuses "bash" there) does not, as upstream adds bash beside the allowed tools.
    with_ = step.get("with")
    listed = with_.get("tools") if isinstance(with_, Mapping) else None
    if isinstance(listed, list) and "bash" not in listed:
        return None
    from little_dist.harness.bash_tool import BashTool
    from little_dist.skills import skill_mounts

    # The skills' files, read-only at /mnt/skills/<name>/ (little_dist.skills.mounts).
    mounts = skill_mounts(skills)
    return BashTool(capabilities.bash, recorder, mounts=mounts, scratch=scratch)


class _Scratch:
    """The attempt's run scratch, made when its bash tool runs a first command (see the
    module docstring); :meth:`changes` is empty when it was never made. A replayed command's
    ``own`` manifest (:meth:`resume`) is taken up when it is made, or at the commit when no
    live command follows (:mod:`little_dist.scratch.snapshots`); so are the attempt's memory
    stores' folders recorded with it (``memory``)."""

    def __init__(
        self,
        world: World,
        dispatch: StepDispatch,
        *,
        memory: LazyMemory | None = None,
    ) -> None:
        self._world, self._dispatch = world, dispatch
        self._made: AttemptScratch | None = None
        self._memory = memory  # mounted beside the scratch, recorded and replayed with own
        self._mounts: list[Mount] | None = None
        self._resumed: Mapping[str, Any] | None = None

    def mounts(self) -> list[Mount]:
        made = self._make()
        if self._mounts is None:
            extra = self._memory.mounts() if self._memory is not None else []
            self._mounts = [*made.mounts, *extra]
        return list(self._mounts)

    def snapshot(self) -> dict[str, Any]:
        manifest = self._make().snapshot()
        remembered = self._memory.snapshot() if self._memory is not None else {}
        if remembered:
            manifest["memory"] = remembered
        return manifest

    def resume(self, record: Mapping[str, Any]) -> None:
        manifest = record.get("own")
        if not isinstance(manifest, Mapping):
            ref = str(record.get("ownRef"))
            manifest = self._world.get_artifact(ref, run_id=self._dispatch.run_id).payload
            if not isinstance(manifest, Mapping):
                raise RuntimeConfigError(f"recorded own-tree manifest {ref} is not an object")
        remembered = manifest.get("memory")
        if self._memory is not None and isinstance(remembered, Mapping):
            self._memory.resume(remembered)
        self._resumed = manifest
        if self._made is not None:
            self._take_up(self._made)

    def _make(self) -> AttemptScratch:
        if self._made is None:
            from little_dist.scratch import AttemptScratch, scratch_files

            dispatch = self._dispatch
            files = scratch_files(self._world.list_events(dispatch.run_id))
            self._made = AttemptScratch(
                self._world, dispatch.run_id, dispatch.step_path, dispatch.attempt, files
            )
            self._take_up(self._made)
        return self._made

    def _take_up(self, made: AttemptScratch) -> None:
        if self._resumed is not None:
            made.restore(self._resumed)
            self._resumed = None

    def changes(self) -> Changes:
        from little_dist.scratch import Changes

        if self._made is None and self._resumed is None:
            return Changes()
        changes = self._make().changes()
        for skipped in changes.skipped:
            _scratch_log.warning(
                "run %s step %r attempt %d: scratch entry %s",
                self._dispatch.run_id,
                self._dispatch.step_path,
                self._dispatch.attempt,
                skipped,
            )
        return changes

    def __enter__(self) -> _Scratch:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._made is not None:
            self._made.close()
            self._made = None


def _mcp_session(
    step: Mapping[str, Any], tools: Mapping[str, Any]
) -> tuple[dict[str, Any] | None, tuple[SkillDescriptor, ...]]:
    """The session's MCP capability manifest (listed now) and the servers' guide skills;
    none for a ``tool.call`` step (it has no model to guide)."""
    from little_dist.mcp.gateway import session_manifest

    mcp, guides = session_manifest(tools)
    return mcp, (() if step.get("uses") == "tool.call" else guides)


def _manifest(
    dispatch: StepDispatch,
    *,
    step: Mapping[str, Any],
    version: WorkflowVersion,
    mcp: Mapping[str, Any] | None,
    bash: BashTool | None = None,
    memory: Sequence[MemoryMountSpec] = (),
) -> dict[str, Any]:
    """What this engine adds to the session manifest (the harness registry adds the rest:
    step path, model slot, tools and skills digests, harness id), and the MCP servers' tool
    lists when the session is offered the MCP gateway (listed now: see
    :mod:`little_dist.mcp.gateway`); when the model is offered bash, upstream's
    ``bashCapabilitiesHash`` and ``memoryStoreIds``, and the memory mounts (store, path, mode)
    as ``memoryMountsHash`` (a resumed session compares them all:
    :mod:`little_dist.harness.drift`)."""
    from little_dist.canonical import sha256_digest
    from little_dist.harness.log_values import frozen_digest

    # Step objects come from the scheduling plan, cached per version: hashed once each.
    manifest: dict[str, Any] = {
        "workflowVersionId": version.id,
        "stepConfigHash": frozen_digest(step),
    }
    if mcp is not None:
        manifest["mcp"] = mcp
    if bash is not None:
        manifest["bashCapabilitiesHash"] = sha256_digest(bash.capabilities.normalized())
        manifest["memoryStoreIds"] = sorted({spec.store_id for spec in memory})
        manifest["memoryMountsHash"] = sha256_digest(
            sorted([spec.store_id, spec.mount_path, str(spec.mode)] for spec in memory)
        )
    return manifest


# StepPlan objects are cached with their version's plan, so the same object recurs for every
# attempt of a step: its schema hash is computed once, and forgotten with the plan (the plan
# cache is bounded; holding the step here would keep it alive past that bound).
_schema_hashes: weakref.WeakKeyDictionary[StepPlan, str | None] = weakref.WeakKeyDictionary()


def _schema_hash(step: StepPlan) -> str | None:
    try:
        return _schema_hashes[step]
    except KeyError:
        digest = output_schema_hash(step.output)
        _schema_hashes[step] = digest
        return digest


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline
