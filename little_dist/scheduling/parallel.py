"""A parallel step: branches scheduled up to ``maxConcurrency``, settled, fanned in.

Upstream's ``executeParallelStep`` as a state machine ``decide`` advances on every call:

1. ``StepScheduled``/``StepAttemptStarted`` for the parallel step, then — once ``items`` and
   ``itemKey`` resolve (unique non-empty keys, at most ``maxBranches``; else the attempt fails
   with causeCode ``runtime_config_error``) — ``ParallelGroupStarted`` with the branch list.
2. ``ParallelBranchScheduled`` for branches in item order while fewer than
   ``maxConcurrency`` are in flight; each branch's steps are a scope of their own at
   ``{step}[{itemKey}].{child}`` (``{step}@attempt_{n}[...]`` on retry n), with ``item`` in
   scope; their decisions and loops route within the branch.
3. A branch whose scope is done -> ``ParallelBranchCompleted`` (its output: ``fanIn.outputStep``'s
   last visit, else the last non-decision step that completed); one whose scope failed ->
   ``ParallelBranchFailed`` with the step's error. ``fail_fast`` stops scheduling after a
   failure, and a terminal cause (``max_visits_exceeded``, ``capability_drift``...) stops it
   in either mode; branches in flight finish.
4. With nothing in flight: a terminal cause fails the step with that error; ``fail_fast``
   with a failure -> ``ParallelGroupFailed`` + ``StepFailed``; otherwise
   ``ParallelGroupCompleted`` + ``StepCompleted`` with the fan-in array (validated against the
   step's output contract).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from little_dist.expressions import UNDEFINED
from little_dist.scheduling.context import (
    Branch,
    BranchResolutionError,
    BranchResult,
    fan_in_output,
)
from little_dist.scheduling.drive import (
    ScopeRun,
    drive_scope,
    emit_step_failed,
    open_attempt,
)
from little_dist.scheduling.env import Env, Virtual
from little_dist.scheduling.plan import (
    ScopePlan,
    StepPlan,
    output_schema_hash,
    step_output_error,
)
from little_dist.scheduling.policy import TERMINAL_CAUSES, cause_of
from little_dist.scheduling.settle import FrontierItem, settle

__all__ = ["drive_parallel"]


@dataclass(frozen=True)
class _Group:
    step: StepPlan
    path: str
    attempt: int
    branches: list[Branch]
    extra: frozenset[str]

    @property
    def children(self) -> ScopePlan:
        assert self.step.parallel is not None
        return self.step.parallel.children

    def base(self) -> dict[str, Any]:
        return {
            "stepPath": self.path,
            "attempt": self.attempt,
            "attemptId": f"attempt_{self.attempt}",
        }


def _terminal(error: Any) -> bool:
    return cause_of(error) in TERMINAL_CAUSES


def _final_error(error: Any) -> Any:
    return {**error, "retriable": False} if isinstance(error, Mapping) else error


def _branch_artifacts(env: Env, children: ScopePlan, prefix: str) -> tuple[str, ...]:
    refs: dict[str, None] = {}
    for step in children.steps:
        for visit in range(step.max_visits):
            view = env.lookup(step.path(prefix, visit))
            if view is None:
                break
            if view.status == "completed":
                refs.update(dict.fromkeys(view.artifact_refs))
    return tuple(refs)


def _last_visit_path(env: Env, step: StepPlan, prefix: str) -> str | None:
    last = None
    for visit in range(step.max_visits):
        path = step.path(prefix, visit)
        view = env.lookup(path)
        if view is None or view.status != "completed":
            break
        last = path
    return last


def _output_path(env: Env, group: _Group, prefix: str, run: ScopeRun) -> str | None:
    """Upstream's branch output: ``fanIn.outputStep``, else the last non-decision step."""
    config = group.step.parallel
    assert config is not None
    children = group.children
    if config.output_step is not None:
        named = children.by_id.get(config.output_step)
        return None if named is None else _last_visit_path(env, named, prefix)
    if run.outcome.last_path is not None:
        return run.outcome.last_path
    final = children.final_step
    return None if final is None else _last_visit_path(env, final, prefix)


def _drive_branch(env: Env, group: _Group, branch: Branch) -> tuple[ScopeRun, BranchResult | None]:
    prefix = branch.branch_path + "."
    run = drive_scope(
        env,
        group.children,
        prefix,
        item=(True, branch.item),
        extra_completed=group.extra,
        allowed_top=group.step.needs,
        scope_label=branch.branch_path,
    )
    if run.kind == "failed":
        error = _final_error(run.error)
        artifacts = _branch_artifacts(env, group.children, prefix)
        return run, BranchResult(
            branch.index, branch.item_key, False, error=error, artifacts=artifacts
        )
    if run.kind == "running":
        return run, None
    path = _output_path(env, group, prefix, run)
    view = env.lookup(path) if path is not None else None
    if view is None or view.status != "completed" or not (view.has_output or view.output_ref):
        error = {
            "name": "Error",
            "message": f"Parallel branch '{branch.branch_path}' is missing final output.",
            "retriable": False,
        }
        run = ScopeRun("failed", run.outcome, error, branch.branch_path)
        return run, BranchResult(branch.index, branch.item_key, False, error=error)
    return run, BranchResult(
        branch.index,
        branch.item_key,
        True,
        output=view.output if view.has_output else UNDEFINED,
        output_ref=view.output_ref,
        artifacts=_branch_artifacts(env, group.children, prefix),
    )


def _settled_result(env: Env, group: _Group, branch: Branch, recorded: Any) -> BranchResult:
    """A recorded branch's result, re-read from the state (for the fan-in)."""
    prefix = branch.branch_path + "."
    if recorded.status == "failed":
        return BranchResult(
            branch.index,
            branch.item_key,
            False,
            error=recorded.error,
            artifacts=_branch_artifacts(env, group.children, prefix),
        )
    outcome = settle(group.children, prefix, env.lookup, env.policy, extra_completed=group.extra)
    path = _output_path(env, group, prefix, ScopeRun("done", outcome))
    view = env.lookup(path) if path is not None else None
    has_output = view is not None and view.has_output
    return BranchResult(
        branch.index,
        branch.item_key,
        True,
        output=view.output if has_output and view is not None else UNDEFINED,
        output_ref=recorded.output_ref or (view.output_ref if view is not None else None),
        artifacts=_branch_artifacts(env, group.children, prefix),
    )


def _record_branch_end(env: Env, group: _Group, branch: Branch, result: BranchResult) -> None:
    payload = {
        **group.base(),
        "branchPath": branch.branch_path,
        "itemKey": branch.item_key,
        "branchIndex": branch.index,
    }
    if result.completed:
        if result.output_ref is not None:
            payload["outputRef"] = result.output_ref
        payload["artifactRefs"] = list(result.artifacts)
        env.emit("ParallelBranchCompleted", payload, f"pbranch-end:{branch.branch_path}")
    else:
        payload["error"] = result.error
        payload["artifactRefs"] = list(result.artifacts)
        env.emit("ParallelBranchFailed", payload, f"pbranch-end:{branch.branch_path}")


def drive_parallel(env: Env, item: FrontierItem) -> bool:
    """Advance the parallel step of ``item``; True when it completed or failed in this call."""
    step = item.step
    config = step.parallel
    assert config is not None
    attempt = open_attempt(env, item)
    path = item.path
    recorded_group = env.state.parallel_groups.get(path) if item.state == "running" else None
    try:
        branches = env.branches(step, path, attempt)
    except BranchResolutionError as exc:
        error = {
            "name": "RuntimeConfigError",
            "message": str(exc),
            "causeCode": "runtime_config_error",
            "retriable": False,
        }
        emit_step_failed(env, step, path, attempt, error)
        env.overlay[path] = Virtual.ended(item.view, error=error)
        return True
    shadowed = tuple(config.children.by_id)
    group = _Group(step, path, attempt, branches, env.completed_top(step.needs, shadowed))
    if recorded_group is None:
        env.emit(
            "ParallelGroupStarted",
            {
                **group.base(),
                "stepId": step.id,
                "branchCount": len(branches),
                "maxConcurrency": config.max_concurrency,
                "failureMode": config.failure_mode,
                "branches": [
                    {"branchPath": b.branch_path, "itemKey": b.item_key, "branchIndex": b.index}
                    for b in branches
                ],
            },
            f"pgroup:{path}:{attempt}",
        )
    recorded = recorded_group.branches if recorded_group is not None else {}
    fail_fast = config.failure_mode == "fail_fast"
    in_flight = 0
    fatal: Any = None
    first_failure: Any = None
    results: dict[int, BranchResult] = {}
    unscheduled: list[Branch] = []
    settled = 0

    def settle_now(branch: Branch, result: BranchResult) -> None:
        nonlocal fatal, first_failure, settled
        settled += 1
        results[branch.index] = result
        if not result.completed:
            if first_failure is None:
                first_failure = result.error
            if fatal is None and _terminal(result.error):
                fatal = result.error

    for branch in branches:
        known = recorded.get(branch.branch_path)
        if known is None:
            unscheduled.append(branch)
            continue
        if known.status == "failed":
            settle_now(
                branch, BranchResult(branch.index, branch.item_key, False, error=known.error)
            )
            continue
        if known.status == "completed":
            settled += 1
            continue
        _, result = _drive_branch(env, group, branch)
        if result is None:
            in_flight += 1
        else:
            _record_branch_end(env, group, branch, result)
            settle_now(branch, result)
    for branch in unscheduled:
        if fatal is not None or (fail_fast and first_failure is not None):
            break
        if in_flight >= config.max_concurrency:
            break
        env.emit(
            "ParallelBranchScheduled",
            {
                "stepPath": path,
                "attempt": attempt,
                "attemptId": f"attempt_{attempt}",
                "branchPath": branch.branch_path,
                "itemKey": branch.item_key,
                "branchIndex": branch.index,
            },
            f"pbranch:{branch.branch_path}",
        )
        _, result = _drive_branch(env, group, branch)
        if result is None:
            in_flight += 1
        else:
            _record_branch_end(env, group, branch, result)
            settle_now(branch, result)
    if in_flight:
        return False
    stopped = fatal is not None or (fail_fast and first_failure is not None)
    if not stopped and settled < len(branches):
        return False
    _finish(env, item, group, recorded, results, fatal, first_failure if fail_fast else None)
    return True


def _finish(
    env: Env,
    item: FrontierItem,
    group: _Group,
    recorded: Mapping[str, Any],
    results: dict[int, BranchResult],
    fatal: Any,
    fail_fast_cause: Any,
) -> None:
    step, path, attempt = group.step, group.path, group.attempt
    config = step.parallel
    assert config is not None
    if fatal is not None:
        error = _final_error(fatal)
        emit_step_failed(env, step, path, attempt, error)
        env.overlay[path] = Virtual.ended(item.view, error=error)
        return
    if fail_fast_cause is not None:
        env.emit(
            "ParallelGroupFailed",
            {**group.base(), "stepId": step.id, "error": _final_error(fail_fast_cause)},
            f"pgroup-end:{path}:{attempt}",
        )
        max_attempts = step.max_attempts or max(env.ctx.default_max_attempts, 1)
        retriable = not _terminal(fail_fast_cause) and attempt < max_attempts
        error = (
            {**fail_fast_cause, "retriable": retriable}
            if isinstance(fail_fast_cause, Mapping)
            else fail_fast_cause
        )
        emit_step_failed(env, step, path, attempt, error)
        env.overlay[path] = Virtual.ended(item.view, error=error)
        return
    ordered: list[BranchResult] = []
    for branch in group.branches:
        found = results.get(branch.index)
        if found is None:
            found = _settled_result(env, group, branch, recorded[branch.branch_path])
        ordered.append(found)
    output = fan_in_output(config.fan_in_order, ordered)
    env.emit(
        "ParallelGroupCompleted",
        {
            **group.base(),
            "stepId": step.id,
            "branchCount": len(group.branches),
            "fanInOrder": config.fan_in_order,
        },
        f"pgroup-end:{path}:{attempt}",
    )
    problem = step_output_error(env.plan, step, output)
    if problem is not None:
        error = {
            "name": "StepSchemaError",
            "message": problem,
            "causeCode": "step_schema_error",
            "retriable": False,
        }
        emit_step_failed(env, step, path, attempt, error)
        env.overlay[path] = Virtual.ended(item.view, error=error)
        return
    refs = list(dict.fromkeys(ref for result in ordered for ref in result.artifacts))
    metadata: dict[str, Any] = {
        "branchCount": len(group.branches),
        "fanInOrder": config.fan_in_order,
        "uses": "parallel",
    }
    if step.output is not None and "mode" in step.output:
        metadata["outputMode"] = step.output["mode"]
    schema_hash = output_schema_hash(step.output)
    if schema_hash is not None:
        metadata["schemaHash"] = schema_hash
    env.emit(
        "StepCompleted",
        {
            "stepPath": path,
            "stepId": step.id,
            "attempt": attempt,
            "output": output,
            "artifactRefs": refs,
            "metadata": metadata,
        },
        f"end:{path}:{attempt}",
    )
    env.overlay[path] = Virtual.ended(item.view, output=output, has_output=True)
