"""Parallel groups and their branches: an engine extension beside upstream's run state.

Upstream's fold ignores ``ParallelGroupStarted``/``ParallelBranch*``/``ParallelGroup*``;
the scheduler wants them, so they are tracked here but kept out of ``RunState.to_json()``
(which stays upstream's shape). Groups are copied on write like steps (see ``_fold``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, TypeGuard

if TYPE_CHECKING:
    from little_dist.run_state._fold import RunStateBuilder

__all__ = ["ParallelBranchState", "ParallelGroupState", "apply_parallel", "is_artifact_ref"]

_REF_PREFIX = "artifact://"


def is_artifact_ref(value: object) -> TypeGuard[str]:
    return value.__class__ is str and value.startswith(_REF_PREFIX)


class ParallelBranchState:
    """One branch of a parallel group (engine extension; not part of upstream's JSON)."""

    __slots__ = ("branch_index", "branch_path", "error", "item_key", "output_ref", "status")

    def __init__(
        self,
        branch_path: str,
        item_key: str | None,
        branch_index: int | None,
        status: Literal["scheduled", "completed", "failed"],
        output_ref: str | None = None,
        error: Any = None,
    ) -> None:
        self.branch_path = branch_path
        self.item_key = item_key
        self.branch_index = branch_index
        self.status = status
        self.output_ref = output_ref
        self.error = error

    def __repr__(self) -> str:
        return f"ParallelBranchState({self.branch_path!r}, {self.status!r})"


class ParallelGroupState:
    """A parallel step's current attempt: its branches by branch path, in schedule order.

    Read from ``ParallelGroupStarted``/``ParallelBranch*``/``ParallelGroup*`` events, which
    upstream's fold ignores; kept beside (not inside) the upstream state shape for the
    scheduler. A new ``ParallelGroupStarted`` (a retry of the group) starts afresh.
    """

    __slots__ = ("_branch_count", "_branches", "_failure_mode", "_path", "_status")

    def __init__(
        self, path: str, branch_count: int | None = None, failure_mode: str | None = None
    ) -> None:
        self._path = path
        self._status: Literal["running", "completed", "failed"] = "running"
        self._branch_count = branch_count
        self._failure_mode = failure_mode
        self._branches: dict[str, ParallelBranchState] = {}

    def _copy(self) -> ParallelGroupState:
        clone = ParallelGroupState(self._path, self._branch_count, self._failure_mode)
        clone._status = self._status
        clone._branches = self._branches.copy()
        return clone

    @property
    def step_path(self) -> str:
        """the parallel step's ``stepPath``"""
        return self._path

    @property
    def status(self) -> Literal["running", "completed", "failed"]:
        """running, completed or failed"""
        return self._status

    @property
    def branch_count(self) -> int | None:
        """``branchCount`` if recorded"""
        return self._branch_count

    @property
    def failure_mode(self) -> str | None:
        """``failureMode`` if recorded"""
        return self._failure_mode

    @property
    def branches(self) -> Mapping[str, ParallelBranchState]:
        return MappingProxyType(self._branches)

    def __repr__(self) -> str:
        return f"ParallelGroupState({self._path!r}, {self._status!r}, {len(self._branches)})"


def apply_parallel(
    builder: RunStateBuilder, payload: dict[str, Any], at: Any, event_type: str
) -> None:
    """Fold one ``Parallel*`` event into the builder's parallel groups."""
    path = payload.get("stepPath")
    if path.__class__ is not str:
        return
    if event_type == "ParallelGroupStarted":
        if builder._parallel_shared:
            builder._parallel = builder._parallel.copy()
            builder._parallel_shared = False
        count = payload.get("branchCount")
        mode = payload.get("failureMode")
        # A new attempt of the group starts afresh.
        builder._parallel[path] = ParallelGroupState(
            path,
            count if count.__class__ is int else None,
            mode if mode.__class__ is str else None,
        )
        builder._parallel_owned.add(path)
        return
    group = builder._group(path, create=event_type == "ParallelBranchScheduled")
    if group is None:
        return
    if event_type == "ParallelGroupCompleted":
        group._status = "completed"
        return
    if event_type == "ParallelGroupFailed":
        group._status = "failed"
        return
    branch_path = payload.get("branchPath")
    if branch_path.__class__ is not str:
        return
    if event_type == "ParallelBranchScheduled":
        key = payload.get("itemKey")
        index = payload.get("branchIndex")
        group._branches[branch_path] = ParallelBranchState(
            branch_path,
            key if key.__class__ is str else None,
            index if index.__class__ is int else None,
            "scheduled",
        )
        return
    known = group._branches.get(branch_path)
    output_ref = payload.get("outputRef")
    group._branches[branch_path] = ParallelBranchState(
        branch_path,
        known.item_key if known else None,
        known.branch_index if known else None,
        "completed" if event_type == "ParallelBranchCompleted" else "failed",
        output_ref if is_artifact_ref(output_ref) else None,
        payload.get("error"),
    )


def parallel_view(groups: Mapping[str, ParallelGroupState]) -> dict[str, Any]:
    """A comparable plain-data view of the groups (for ``RunState.__eq__``)."""
    return {
        path: (
            group.status,
            group.branch_count,
            group.failure_mode,
            [
                (b.branch_path, b.item_key, b.branch_index, b.status, b.output_ref, b.error)
                for b in group.branches.values()
            ],
        )
        for path, group in groups.items()
    }
