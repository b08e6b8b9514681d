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

A branch is driven by :mod:`~little_dist.scheduling.branch`; each call's pass over the branches
is :mod:`~little_dist.scheduling.fanout`'s, which with ``RunContext.memoize`` (the default)
reads the records and replays the unchanged in-flight branches from what the context
remembers (:mod:`~little_dist.scheduling.branch_cache`,
:mod:`~little_dist.scheduling.walk`), with the same outcome as reading and driving every
branch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from little_dist import occurrences
from little_dist.scheduling.branch import Group, final_error, is_terminal, settled_result
from little_dist.scheduling.branch_cache import group_cache
from little_dist.scheduling.context import BranchResolutionError, BranchResult, fan_in_output
from little_dist.scheduling.drive import emit_step_failed, open_attempt
from little_dist.scheduling.env import Env, Virtual
from little_dist.scheduling.fanout import walk_all, walk_changed
from little_dist.scheduling.settle import FrontierItem
from little_dist.scheduling.step_graph import output_schema_hash, step_output_error

__all__ = ["drive_parallel"]


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
    group = Group(step, path, attempt, branches, env.completed_top(step.needs, shadowed))
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
    cache = group_cache(env.ctx, step, path, attempt, branches)
    if cache is None:
        tally = walk_all(env, group, recorded)
    else:
        tally = walk_changed(env, group, cache, recorded_group)
    if tally.in_flight:
        return False
    stopped = tally.stopped(fail_fast=config.failure_mode == "fail_fast")
    if not stopped and tally.settled < len(branches):
        return False
    fail_fast_cause = tally.first_failure if config.failure_mode == "fail_fast" else None
    results = tally.all_results(env, branches, recorded)
    _finish(env, item, group, recorded, results, tally.fatal, fail_fast_cause)
    return True


# Long on purpose: a group's three endings (a branch failed fatally, fail-fast, all
# settled) side by side, each emitting upstream's events in upstream's order.
def _finish(
    env: Env,
    item: FrontierItem,
    group: Group,
    recorded: Mapping[str, Any],
    results: dict[int, BranchResult],
    fatal: Any,
    fail_fast_cause: Any,
) -> None:
    step, path, attempt = group.step, group.path, group.attempt
    config = step.parallel
    assert config is not None
    if fatal is not None:
        error = final_error(fatal)
        emit_step_failed(env, step, path, attempt, error)
        env.overlay[path] = Virtual.ended(item.view, error=error)
        return
    if fail_fast_cause is not None:
        env.emit(
            "ParallelGroupFailed",
            {**group.base(), "stepId": step.id, "error": final_error(fail_fast_cause)},
            f"pgroup-end:{path}:{attempt}",
        )
        max_attempts = step.max_attempts or max(env.ctx.default_max_attempts, 1)
        retriable = not is_terminal(fail_fast_cause) and attempt < max_attempts
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
            found = settled_result(env, group, branch, recorded[branch.branch_path])
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
        occurrences.attempt_ended(path, attempt),
    )
    env.overlay[path] = Virtual.ended(item.view, output=output, has_output=True)
