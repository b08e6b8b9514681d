"""One branch of a parallel step attempt: drive its scope, read its result, record its end.

A branch's steps are a scope of their own under ``{branchPath}.``, with ``item`` in scope and
the parallel step's completed top-level needs counted as complete (see
:mod:`little_dist.scheduling.parallel` for the whole state machine).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from little_dist import occurrences
from little_dist.expressions import UNDEFINED
from little_dist.scheduling.context import Branch, BranchResult
from little_dist.scheduling.drive import ScopeRun, drive_scope
from little_dist.scheduling.env import Env
from little_dist.scheduling.policy import TERMINAL_CAUSES, cause_of
from little_dist.scheduling.settle import settle
from little_dist.scheduling.step_graph import ScopePlan, StepPlan

__all__ = [
    "Group",
    "drive_branch",
    "final_error",
    "is_terminal",
    "record_branch_end",
    "settled_result",
]


@dataclass(frozen=True)
class Group:
    """One attempt of a parallel step: its branches and completed top-level needs."""

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


def is_terminal(error: Any) -> bool:
    return cause_of(error) in TERMINAL_CAUSES


def final_error(error: Any) -> Any:
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


def _output_path(env: Env, group: Group, prefix: str, run: ScopeRun) -> str | None:
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


def drive_branch(env: Env, group: Group, branch: Branch) -> tuple[ScopeRun, BranchResult | None]:
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
        error = final_error(run.error)
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


def settled_result(env: Env, group: Group, branch: Branch, recorded: Any) -> BranchResult:
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


def record_branch_end(env: Env, group: Group, branch: Branch, result: BranchResult) -> None:
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
        env.emit("ParallelBranchCompleted", payload, occurrences.branch_ended(branch.branch_path))
    else:
        payload["error"] = result.error
        payload["artifactRefs"] = list(result.artifacts)
        env.emit("ParallelBranchFailed", payload, occurrences.branch_ended(branch.branch_path))
