"""Sub-runs on the fleet: where a worker's workflow tools start their children, and what the
scheduler does when a run that has a parent or children ends.

The design is told in :mod:`little_dist.subruns` ("How the fleet suspends and resumes"):

* :class:`FleetSubRuns` is the worker's :class:`~little_dist.subruns.engine.SubRunHost`: the
  children the calls of a model turn recorded are submitted as any client would, in batches
  (:func:`submit_runs` with the derived run ids and the parent links: idempotent), then the
  attempt suspends; a retried attempt's call submits its child again alone (:func:`submit_run`);
* :func:`notice_run_end` is the scheduler's part, at every run end it sees: a child's end is
  recorded in its parent's log (``little.subrun.ended``, occurrence ``subrun-end:{child}``,
  which signals the parent), and the children a run started and that have not ended are
  asked to stop (``little.run.cancel_requested``). Both are idempotent appends, so a
  scheduler that dies before its signal is acknowledged leaves them to the next one.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from little_dist import occurrences
from little_dist.errors import NotFoundError, RunEndedError
from little_dist.events import EventInput
from little_dist.fleet.engine_events import CANCEL_EVENT_TYPE
from little_dist.run_state import RunState
from little_dist.run_state._subruns import SUB_RUN_ENDED
from little_dist.world.base import World

if TYPE_CHECKING:
    from little_dist.authoring import WorkflowDefinition
    from little_dist.fleet.worker import WorkerRuntime
    from little_dist.runtime import Capabilities
    from little_dist.subruns.engine import ChildToStart

__all__ = ["FleetSubRuns", "notice_run_end", "with_fleet_sub_runs"]


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
    ) -> None:
        from little_dist.fleet.submission import submit_run

        runtime = self._runtime
        submit_run(
            runtime.world,
            workflow,
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
        children in one batch (:func:`submit_runs`: a few dozen starts per round trip; the
        scheduler makes each child's first decision, its start signals it)."""
        from little_dist.fleet.submission import submit_runs

        runtime = self._runtime
        by_workflow: dict[str, list[ChildToStart]] = {}
        for start in starts:
            by_workflow.setdefault(start.workflow.id, []).append(start)
        for group in by_workflow.values():
            submit_runs(
                runtime.world,
                group[0].workflow,
                [start.run_input for start in group],
                run_ids=[start.child_run_id for start in group],
                settings=runtime.settings,
                registry=runtime.registry,
                parents=[start.parent for start in group],
            )


def with_fleet_sub_runs(
    capabilities: Capabilities, host: FleetSubRuns, cache: dict[int, tuple[Any, Any]]
) -> Capabilities:
    """``capabilities`` whose workflow tools start their sub-runs through ``host``; made once
    per capabilities object (``cache``: by its id, with the object itself kept alive)."""
    found = cache.get(id(capabilities))
    if found is not None and found[0] is capabilities:
        made: Capabilities = found[1]
        return made
    made = dataclasses.replace(capabilities, sub_runs=host)
    cache[id(capabilities)] = (capabilities, made)
    return made


def notice_run_end(world: World, run_id: str, state: RunState) -> None:
    """What the end of ``run_id`` (ended in ``state``) means to the runs linked to it: its
    parent learns how it ended, its open children are asked to stop (see the module
    docstring). Nothing to do (and no IO) for a run without links."""
    links = state.sub_runs
    for child in links.open_children:
        request = EventInput(
            type=CANCEL_EVENT_TYPE,
            occurrence_id=occurrences.CANCEL,
            payload={"reason": f"its parent run {run_id} ended", "parentRunId": run_id},
        )
        with contextlib.suppress(RunEndedError, NotFoundError):
            world.append(child, request)
    parent = links.parent_run_id
    if parent is None:
        return
    from little_dist.subruns.engine import ended_payload_of

    payload: dict[str, Any] = {"parentRunId": parent}
    if links.parent_step_path is not None:
        payload["stepPath"] = links.parent_step_path
    payload.update(ended_payload_of(run_id, state))
    with contextlib.suppress(RunEndedError):
        world.append(
            parent,
            EventInput(
                type=SUB_RUN_ENDED,
                occurrence_id=occurrences.sub_run_ended(run_id),
                payload=payload,
            ),
        )
