"""The fleet's Celery tasks. Arguments are ids only, so Flower shows what each task is.

==========================================================  ===============  =============
task                                                        queue (role)     body
==========================================================  ===============  =============
``little.execute_step(run_id, step_path, attempt)``         worker           one attempt
``little.fix_step(run_id, step_path, attempt)``             fixer            one fix attempt
``little.plan(run_id)``                                     planner          plan + start
``little.orchestrate(run_id)``                              orchestrator     advance a run
``little.submit_run(workflow_id, lwir, input, run_id)``     planner          submit a run
==========================================================  ===============  =============

A task body reads the run's log once, finds its WorkflowVersion (cached per process) and the
capabilities of its workflow (from the ``--app`` registry, by the LWIR's ``metadata.name``)
and calls :func:`~little_dist.runtime.execute_step_attempt`, which fences every write with
the step lease: a task delivered twice finds the step busy or the attempt over and does
nothing. Nothing waits on another run while holding a worker slot.

Fast path: after a commit the worker advances the run itself
(:func:`~little_dist.dist.dispatch.advance_run`: decide, append, send what became ready
under the dispatch leases), so a chain of steps does not wait for a scheduler round trip;
the scheduler still gets the signal and finds nothing new. ``WorkerRuntime(fast_path=False)``
(``little worker --no-fast-path``) leaves all of it to the scheduler.

``little.orchestrate`` resumes a run by advancing it (decide + dispatch): the engine's
orchestrator waits are suspensions recorded in the log, never a blocked slot.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from typing import TYPE_CHECKING, Any

from little_dist.dist.dispatch import (
    SUBMITTED_EVENT_TYPE,
    TASK_EXECUTE_STEP,
    TASK_FIX_STEP,
    TASK_ORCHESTRATE,
    TASK_PLAN,
    TASK_SUBMIT_RUN,
    RunTracker,
    VersionCache,
    advance_run,
)
from little_dist.errors import LittleError
from little_dist.events import EventInput
from little_dist.ids import InvalidIdError, validate_run_id
from little_dist.runtime import AttemptOutcome, LeaseHeartbeat, execute_step_attempt
from little_dist.scheduling import StepDispatch
from little_dist.scheduling.context import StepPathError, locate_step
from little_dist.scheduling.plan import plan_for
from little_dist.settings import Settings
from little_dist.world.base import World, run_lease_key

if TYPE_CHECKING:
    from celery import Celery

    from little_dist.dist.registry import AppRegistry
    from little_dist.scheduling import DispatchKind

__all__ = ["TASK_NAMES", "WorkerRuntime", "register_tasks"]

TASK_NAMES = (TASK_EXECUTE_STEP, TASK_FIX_STEP, TASK_PLAN, TASK_ORCHESTRATE, TASK_SUBMIT_RUN)

_log = logging.getLogger("little.worker")


class WorkerRuntime:
    """What task bodies use, built once per process: world, app registry, version cache.

    ``world`` and ``registry`` are opened lazily (after a prefork pool forks, in each child)
    unless given. ``app`` is the Celery app fast-path dispatches are sent with; set by
    :func:`register_tasks`.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        world: World | None = None,
        registry: AppRegistry | None = None,
        fast_path: bool = True,
    ) -> None:
        self.settings = settings
        self.fast_path = fast_path
        self.versions = VersionCache()
        self.app: Celery | None = None
        self._world = world
        self._registry = registry
        self._lock = threading.Lock()
        self.name = f"worker:{socket.gethostname()}:{os.getpid()}"

    @property
    def world(self) -> World:
        with self._lock:
            if self._world is None:
                from little_dist.dist.world import world_from_settings

                self._world = world_from_settings(self.settings)
            return self._world

    @property
    def registry(self) -> AppRegistry:
        with self._lock:
            if self._registry is None:
                from little_dist.dist.registry import load_registry

                self._registry = load_registry(self.settings.app)
            return self._registry

    def close(self) -> None:
        with self._lock:
            if self._world is not None:
                self._world.close()
                self._world = None

    # -- task bodies -------------------------------------------------------------------------

    def execute(self, run_id: str, step_path: str, attempt: int, kind: DispatchKind) -> str:
        """One attempt of one step; the :class:`AttemptOutcome` value (or why nothing ran)."""
        try:
            validate_run_id(run_id)
        except InvalidIdError as error:
            _log.error("refused %s for %r: %s", kind, run_id, error)
            return "invalid"
        world = self.world
        events = world.list_events(run_id)
        tracker = RunTracker(
            world, run_id, versions=self.versions, max_branches_cap=self.settings.max_branches_cap
        )
        tracker.fold(events)
        ctx = tracker.context
        if ctx is None:
            _log.warning("%s %s %s#%d: the run has not started", kind, run_id, step_path, attempt)
            return "not_started"
        try:
            step = locate_step(plan_for(ctx.version), step_path).step
        except StepPathError as error:
            _log.error("%s %s: %s", kind, run_id, error)
            return "invalid"
        dispatch = StepDispatch(
            run_id=run_id,
            step_path=step_path,
            step_id=step.id,
            attempt=attempt,
            role="fixer" if kind == "fix_step" else "worker",
            kind=kind,
        )
        outcome = execute_step_attempt(
            world,
            dispatch,
            version=ctx.version,
            capabilities=self.registry.capabilities_for(ctx.version),
            lease_ttl=self.settings.lease_ttl,
            state=tracker.state(),
            context=ctx,
            prior_events=events,
            holder=f"{self.name}:{uuid.uuid4().hex[:12]}",
        )
        _log.info("%s %s %s#%d: %s", kind, run_id, step_path, attempt, outcome.value)
        if outcome in (AttemptOutcome.completed, AttemptOutcome.failed):
            self._advance(tracker)
        return outcome.value

    def plan(self, run_id: str) -> str:
        """Plan a submitted run with its workflow's planner, then start it."""
        from little_dist.local_runner import check_run_input

        validate_run_id(run_id)
        world = self.world
        events = world.list_events(run_id)
        tracker = RunTracker(
            world, run_id, versions=self.versions, max_branches_cap=self.settings.max_branches_cap
        )
        tracker.fold(events)
        if any(event.type == "RunStarted" for event in events):
            self._advance(tracker)
            return "started"
        submitted = next((e for e in events if e.type == SUBMITTED_EVENT_TYPE), None)
        if submitted is None:
            _log.warning("plan %s: nothing was submitted under this run id", run_id)
            return "unknown_run"
        workflow_id = submitted.payload.get("workflowId")
        run_input = submitted.payload.get("input")
        definition = self.registry.get(workflow_id) if isinstance(workflow_id, str) else None
        if definition is None:
            _fail_unplanned(
                world,
                run_id,
                f"workflow {workflow_id!r} is not defined in the planner's app module "
                f"({', '.join(self.registry.modules) or 'no --app given'})",
            )
            return "unknown_workflow"
        lease = world.acquire_lease(
            run_lease_key(run_id, "plan"),
            f"{self.name}:{uuid.uuid4().hex[:12]}",
            self.settings.lease_ttl,
        )
        if lease is None:
            return "busy"  # another planner works on it
        heartbeat = LeaseHeartbeat(world, lease, self.settings.lease_ttl).start()
        try:
            from little_dist.planner import resolve_version

            version = resolve_version(
                world,
                run_id,
                definition,
                run_input,
                capabilities=self.registry.capabilities_for_workflow(definition.id),
            )
            if version is None:
                return "failed"  # planning failed and recorded RunFailed
            check_run_input(version, run_input)
            world.append_batch(
                run_id,
                [
                    EventInput(
                        type="WorkflowVersionRegistered",
                        occurrence_id="version-registered",
                        payload={
                            "workflowVersionId": version.id,
                            "workflowVersionHash": version.hash,
                        },
                    ),
                    EventInput(
                        type="RunStarted",
                        occurrence_id="run-start",
                        payload={"workflowVersionId": version.id, "input": run_input},
                    ),
                ],
            )
        finally:
            heartbeat.stop()
            world.release_lease(heartbeat.lease)
        self._advance(tracker)
        return "started"

    def orchestrate(self, run_id: str) -> str:
        """Advance a run: decide, append, dispatch what is ready."""
        validate_run_id(run_id)
        tracker = RunTracker(
            self.world,
            run_id,
            versions=self.versions,
            max_branches_cap=self.settings.max_branches_cap,
        )
        result = self._advance(tracker, force=True)
        return "done" if result else "advanced"

    def submit(
        self,
        workflow_id: str | None = None,
        lwir: dict[str, Any] | None = None,
        input: Any = None,
        run_id: str | None = None,
    ) -> str:
        """Submit a run of a registered workflow (by id) or of an LWIR document."""
        from little_dist.dist.client import submit_run

        if (workflow_id is None) == (lwir is None):
            raise LittleError("little.submit_run takes exactly one of workflow_id and lwir")
        target: Any = lwir if lwir is not None else workflow_id
        return submit_run(
            self.world,
            target,
            input,
            run_id=run_id,
            app=self.app,
            settings=self.settings,
            registry=self.registry,
            holder=self.name,
        )

    def _advance(self, tracker: RunTracker, *, force: bool = False) -> bool:
        """The fast path; whether the run is over. Failures are left to the scheduler."""
        if (not self.fast_path and not force) or self.app is None:
            return False
        try:
            return advance_run(self.world, self.app, self.settings, tracker, holder=self.name).done
        except LittleError as error:
            _log.warning(
                "fast path for %s: %s (the scheduler will catch up)", tracker.run_id, error
            )
            return False


def _fail_unplanned(world: World, run_id: str, message: str) -> None:
    world.append_batch(
        run_id,
        [
            EventInput(
                type="RunStarted",
                occurrence_id="run-start",
                payload={"workflowVersionId": "uncompiled"},
            ),
            EventInput(
                type="RunFailed",
                occurrence_id="run-end",
                payload={
                    "workflowVersionId": "uncompiled",
                    "error": {
                        "name": "RuntimeConfigError",
                        "message": message,
                        "causeCode": "runtime_config_error",
                        "retriable": False,
                    },
                },
            ),
        ],
    )


def register_tasks(app: Celery, runtime: WorkerRuntime) -> None:
    """Register the five tasks on ``app``, their bodies running on ``runtime``."""
    runtime.app = app

    @app.task(name=TASK_EXECUTE_STEP, ignore_result=True, shared=False)  # type: ignore[untyped-decorator]
    def execute_step(run_id: str, step_path: str, attempt: int) -> str:
        return runtime.execute(run_id, step_path, int(attempt), "execute_step")

    @app.task(name=TASK_FIX_STEP, ignore_result=True, shared=False)  # type: ignore[untyped-decorator]
    def fix_step(run_id: str, step_path: str, attempt: int) -> str:
        return runtime.execute(run_id, step_path, int(attempt), "fix_step")

    @app.task(name=TASK_PLAN, ignore_result=True, shared=False)  # type: ignore[untyped-decorator]
    def plan(run_id: str) -> str:
        return runtime.plan(run_id)

    @app.task(name=TASK_ORCHESTRATE, ignore_result=True, shared=False)  # type: ignore[untyped-decorator]
    def orchestrate(run_id: str) -> str:
        return runtime.orchestrate(run_id)

    @app.task(name=TASK_SUBMIT_RUN, ignore_result=True, shared=False)  # type: ignore[untyped-decorator]
    def submit_run(
        workflow_id: str | None = None,
        lwir: dict[str, Any] | None = None,
        input: Any = None,
        run_id: str | None = None,
    ) -> str:
        return runtime.submit(workflow_id=workflow_id, lwir=lwir, input=input, run_id=run_id)
