"""The in-process sub-run host: :class:`LocalSubRuns` drives a child run to its end in the
calling thread (the local runner's way, as upstream's in-process ``runWorkflow`` does).

A workflow tool's call in process reaches its child through it (the fleet's host,
:class:`~little_dist.fleet.sub_runs.FleetSubRuns`, starts the child elsewhere instead and
the attempt suspends). It runs the child on the in-process engine
(:func:`~little_dist.in_process.run_in_process`), never through the public entry point: a
child is started, resumed or read back by its derived run id, so driving it again is
idempotent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from little_dist.subruns.engine import ChildToStart, SubRunOutcome, failed_outcome
from little_dist.subruns.engine import outcome_from_state as _outcome_from_state

if TYPE_CHECKING:
    from little_dist.authoring.definition import WorkflowDefinition
    from little_dist.compiler import WorkflowVersion
    from little_dist.harness.types import Harness, HarnessRole
    from little_dist.world.base import World

__all__ = ["LocalSubRuns"]


class LocalSubRuns:
    """The :class:`~little_dist.subruns.engine.SubRunHost` (and
    :class:`~little_dist.subruns.engine.SubRunDriver`) of a run in this process, over
    ``world``: ``harness`` and ``max_workers`` are the children's."""

    def __init__(
        self,
        world: World,
        *,
        harness: Harness | Mapping[HarnessRole, Harness] | None = None,
        max_workers: int = 4,
    ) -> None:
        self.world = world
        self.harness = harness
        self.max_workers = max_workers

    def start(
        self,
        child_run_id: str,
        workflow: WorkflowDefinition,
        run_input: Any,
        parent: Mapping[str, Any],
        *,
        version: WorkflowVersion | None = None,
    ) -> None:
        """Start the child: here, that is run it to its end (idempotent on its run id)."""
        self.run_to_end(child_run_id, workflow, run_input, parent, version=version)

    def start_many(self, starts: list[ChildToStart]) -> None:
        for child in starts:
            self.start(
                child.child_run_id,
                child.workflow,
                child.run_input,
                child.parent,
                version=child.version,
            )

    def run_to_end(
        self,
        child_run_id: str,
        workflow: WorkflowDefinition,
        run_input: Any,
        parent: Mapping[str, Any],
        *,
        version: WorkflowVersion | None = None,
    ) -> SubRunOutcome:
        """Run (start, resume or read back) the child in this thread until it ends; its
        outcome. ``version``: run that WorkflowVersion (planned before) instead of resolving
        one for the input."""
        from little_dist.authoring.errors import RunFailedError
        from little_dist.authoring.options import RunOptions

        options = RunOptions(harness=self.harness, max_workers=self.max_workers)
        if version is not None:
            from little_dist.local_runner import run_version

            state = run_version(
                self.world,
                version,
                run_input,
                run_id=child_run_id,
                capabilities=workflow.capabilities(self.harness),
                max_workers=self.max_workers,
                pricing_fallback=options.pricing_fallback,
                parent=parent,
            )
            return _outcome_from_state(child_run_id, state)
        from little_dist.in_process import run_in_process

        try:
            result = run_in_process(
                workflow,
                run_input,
                options,
                world=self.world,
                run_id=child_run_id,
                parent=parent,
            )
        except RunFailedError as failure:
            return failed_outcome(
                child_run_id, failure.cause_code, str(failure) or None, failure.failed_step_path
            )
        return SubRunOutcome(child_run_id, "completed", output=result.state.output)
