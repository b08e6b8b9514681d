"""Sub-runs on the fleet: where a worker's workflow tools start their children, and what the
scheduler does when a run that has a parent or children ends.

The design is told in :mod:`little_dist.subruns` ("How the fleet suspends and resumes"):

* :class:`FleetSubRuns` is the worker's :class:`~little_dist.subruns.engine.SubRunHost`: the
  children the calls of a model turn recorded are submitted as any client would, in batches
  (:func:`submit_runs` with the derived run ids and the parent links: idempotent), then the
  attempt suspends; a retried attempt's call submits its child again alone (:func:`submit_run`);
* the scheduler's part, at every run end it sees: a child's end is recorded in its
  parent's log (``little.subrun.ended``, occurrence ``subrun-end:{child}``, which signals
  the parent): the ends of one batch of signals by parent, one append per parent
  (:class:`ParentNotices`), or one at once (:func:`notice_run_end`, a sweep's); and the
  children a run started and that have not ended are asked to stop
  (``little.run.cancel_requested``, :func:`cancel_open_children`). Both are idempotent
  appends, so a scheduler that dies before its signals are acknowledged leaves them to the
  next one.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from little_dist import occurrences
from little_dist.errors import NotFoundError, RunEndedError
from little_dist.event_types.engine import CANCEL_EVENT_TYPE, SUB_RUN_ENDED
from little_dist.events import EventInput
from little_dist.run_state import RunState
from little_dist.world.base import World

if TYPE_CHECKING:
    from little_dist.authoring import WorkflowDefinition
    from little_dist.compiler import WorkflowVersion
    from little_dist.fleet.worker import WorkerRuntime
    from little_dist.runtime import Capabilities
    from little_dist.subruns.engine import ChildToStart

__all__ = [
    "FleetSubRuns",
    "ParentNotices",
    "cancel_open_children",
    "notice_run_end",
    "with_fleet_sub_runs",
]


class FleetSubRuns:
    """Starts a worker's sub-runs on the fleet (see the module docstring)."""

    def __init__(self, runtime: WorkerRuntime) -> None:
        self._runtime = runtime

    def start(
        self,
        child_run_id: str,
        workflow: WorkflowDefinition,
        run_input: Any,
        parent: Mapping[str, Any],
        *,
        version: WorkflowVersion | None = None,
    ) -> None:
        from little_dist.fleet.submission import submit_run

        runtime = self._runtime
        submit_run(
            runtime.world,
            workflow if version is None else version,
            run_input,
            run_id=child_run_id,
            queue=runtime.queue,
            settings=runtime.settings,
            registry=runtime.registry,
            holder=runtime.name,
            window=runtime.window,
            parent=parent,
        )

    def start_many(self, starts: list[ChildToStart]) -> None:
        """Submit every child of ``starts`` (the calls of one model turn), a workflow's
        children (per planned version, for an orchestrator's) in one batch
        (:func:`submit_runs`: a few dozen starts per round trip; the scheduler makes each
        child's first decision, its start signals it).

        Fresh: no S3 look per child. ``starts`` are the calls whose ``little.subrun.started``
        the attempt's memo did not hold (:func:`~little_dist.subruns.engine.start_elsewhere`;
        a call the memo shows started is submitted again by :meth:`start`, with the look).
        Every submit of a child follows the record of its start in the parent's log, and the
        memo holds every event of the step's earlier attempts (an attempt is due only once
        the one before it ended, after its records, and a fenced zombie appends nothing past
        its lease): so no earlier attempt submitted these children, no archive of them can
        exist, and a child with no log in Redis is new. (A log in Redis is found as ever.)"""
        from little_dist.fleet.submission import submit_runs

        runtime = self._runtime
        by_workflow: dict[tuple[str, str | None], list[ChildToStart]] = {}
        for start in starts:
            version_id = start.version.id if start.version is not None else None
            by_workflow.setdefault((start.workflow.id, version_id), []).append(start)
        for group in by_workflow.values():
            first = group[0]
            submit_runs(
                runtime.world,
                first.workflow if first.version is None else first.version,
                [start.run_input for start in group],
                run_ids=[start.child_run_id for start in group],
                settings=runtime.settings,
                registry=runtime.registry,
                parents=[start.parent for start in group],
                fresh=True,
            )


def with_fleet_sub_runs(
    capabilities: Capabilities,
    host: FleetSubRuns,
    cache: dict[int, tuple[Any, Any]],
    quotas: Any = None,
) -> Capabilities:
    """``capabilities`` whose workflow tools start their sub-runs through ``host`` (and whose
    model calls go through the worker's quota limiter ``quotas``, when it has one); made once
    per capabilities object (``cache``: by its id, with the object itself kept alive)."""
    found = cache.get(id(capabilities))
    if found is not None and found[0] is capabilities:
        made: Capabilities = found[1]
        return made
    made = dataclasses.replace(capabilities, sub_runs=host, quotas=quotas)
    cache[id(capabilities)] = (capabilities, made)
    return made


def notice_run_end(world: World, run_id: str, state: RunState) -> None:
    """What the end of ``run_id`` (ended in ``state``) means to the runs linked to it, now:
    its parent learns how it ended, its open children are asked to stop (see the module
    docstring). Nothing to do (and no IO) for a run without links. The scheduler's batches
    go through :class:`ParentNotices` instead (one append per parent per batch)."""
    cancel_open_children(world, run_id, state)
    notices = ParentNotices()
    if notices.add(run_id, state):
        _, failed = notices.record(world)
        if failed and notices.error is not None:
            raise notices.error


def cancel_open_children(world: World, run_id: str, state: RunState) -> None:
    """Ask every child ``run_id`` started and that has not ended to stop (it ended)."""
    for child in state.sub_runs.open_children:
        request = EventInput(
            type=CANCEL_EVENT_TYPE,
            occurrence_id=occurrences.CANCEL,
            payload={"reason": f"its parent run {run_id} ended", "parentRunId": run_id},
        )
        with contextlib.suppress(RunEndedError, NotFoundError):
            world.append(child, request)


@dataclasses.dataclass(frozen=True)
class _Notice:
    child_run_id: str
    status: str
    sequence: int
    event: EventInput


class ParentNotices:
    """The ``little.subrun.ended`` of the children that ended in one scheduler batch, by
    parent, recorded with one append per parent (:meth:`record`): a parent whose 1,000
    children end in a few batches gets a few appends, signals and looks, not 1,000.
    Each event keeps its occurrence id (``subrun-end:{child}``), so a batch recorded
    twice (a scheduler killed before it acknowledged the children's signals) records
    nothing twice, and one recorded in part (a scheduler killed in between) is completed
    by whoever looks at the remaining children again."""

    def __init__(self) -> None:
        self._by_parent: dict[str, list[_Notice]] = {}
        #: The last error :meth:`record` met (storage unavailable, mostly), if any.
        self.error: Exception | None = None
        #: The parents whose logs took notices at the last :meth:`record` (open ones).
        self.told: list[str] = []

    def __len__(self) -> int:
        return sum(len(notices) for notices in self._by_parent.values())

    def add(self, run_id: str, state: RunState) -> bool:
        """Keep the notice of ``run_id``'s end (in ``state``) for its parent; whether it has
        a parent (without one there is nothing to keep)."""
        links = state.sub_runs
        parent = links.parent_run_id
        if parent is None:
            return False
        from little_dist.subruns.engine import ended_payload_of

        payload: dict[str, Any] = {"parentRunId": parent}
        if links.parent_step_path is not None:
            payload["stepPath"] = links.parent_step_path
        payload.update(ended_payload_of(run_id, state))
        event = EventInput(
            type=SUB_RUN_ENDED,
            occurrence_id=occurrences.sub_run_ended(run_id),
            payload=payload,
        )
        notice = _Notice(run_id, state.status, state.event_count, event)
        self._by_parent.setdefault(parent, []).append(notice)
        return True

    def record(self, world: World) -> tuple[list[tuple[str, str, int]], list[str]]:
        """Append the notices, one batch per parent (a parent that ended takes none: its
        log is closed, and its end cancelled what was open). ``(recorded, failed)``: the
        children whose notice is in their parent's log (or needs not be), as ``(run id,
        status, last sequence)``, and those whose parent's append raised (storage
        unavailable, mostly: their signals must stay pending; :attr:`error` says why)."""
        recorded: list[tuple[str, str, int]] = []
        failed: list[str] = []
        self.told = []
        by_parent, self._by_parent = self._by_parent, {}
        for parent, notices in by_parent.items():
            try:
                world.append_batch(parent, [notice.event for notice in notices])
                self.told.append(parent)
            except RunEndedError:
                pass
            except Exception as exc:  # storage down (or a bug): tell it again later
                self.error = exc
                failed += [notice.child_run_id for notice in notices]
                continue
            recorded += [
                (notice.child_run_id, notice.status, notice.sequence) for notice in notices
            ]
        return recorded, failed
