"""The fleet's Celery tasks. Arguments are ids only, so Flower shows what each task is.

==========================================================  ===============  =============
task                                                        queue (role)     body
==========================================================  ===============  =============
``little.execute_step(run_id, step_path, attempt)``         worker           one attempt
``little.fix_step(run_id, step_path, attempt)``             fixer            one fix attempt
``little.plan(run_id)``                                     planner          plan + start
``little.orchestrate(run_id)``                              orchestrator     advance a run
``little.submit_run(workflow_id, ..., deadline, ...)``      planner          submit a run
==========================================================  ===============  =============

A task body catches up the run's cached tracker
(:class:`~little_dist.fleet.run_cache.RunCache`: only the events appended since this process
last looked are read and folded), finds its WorkflowVersion (cached per
process) and the capabilities of its workflow (from the ``--app`` registry, by the LWIR's
``metadata.name``) and calls :func:`~little_dist.runtime.execute_step_attempt`, which
fences every write with the step lease: a task delivered twice finds the step busy or the
attempt over and does nothing. Nothing waits on another run while holding a worker slot.

Fast path: after a commit the worker advances the run itself
(:func:`~little_dist.fleet.dispatch.advance_run`: decide, append, send what became ready
under the dispatch leases), so a chain of steps does not wait for a scheduler round trip,
and runs one next step of its roles in the same slot (eager continuation, see
:mod:`~little_dist.fleet.fastpath`). Its commit then does not signal the scheduler (which would
only find nothing new); the scheduler's sweep (every few seconds) covers a worker that died
between its commit and its look. Threads of one process that commit steps of one run at once
advance it once (:class:`~little_dist.fleet.advancing.Advancing`).
``WorkerRuntime(fast_path=False)`` (``little worker --no-fast-path``) leaves all of it to
the scheduler, and every commit signals it.

``little.orchestrate`` resumes a run by advancing it (decide + dispatch): the engine's
orchestrator waits are suspensions recorded in the log, never a blocked slot.

``little.submit_run`` is sent by name by other services: its arguments are checked as sent
(a misspelled one included) and a refusal ends the task FAILURE with
:class:`~little_dist.fleet.refusals.SubmissionRefused`, an expected error (``throws``: one
log line, no traceback, no retry), after it is recorded for the sender (see
:mod:`~little_dist.fleet.refusals`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from little_dist.fleet.sending import (
    TASK_EXECUTE_STEP,
    TASK_FIX_STEP,
    TASK_ORCHESTRATE,
    TASK_PLAN,
    TASK_SUBMIT_RUN,
)
from little_dist.fleet.worker import WorkerRuntime

if TYPE_CHECKING:
    from celery import Celery

__all__ = ["TASK_NAMES", "WorkerRuntime", "register_tasks"]

TASK_NAMES = (TASK_EXECUTE_STEP, TASK_FIX_STEP, TASK_PLAN, TASK_ORCHESTRATE, TASK_SUBMIT_RUN)


def register_tasks(app: Celery, runtime: WorkerRuntime) -> None:
    """Register the five tasks on ``app``, their bodies running on ``runtime``."""
    from celery import Task
    from celery.signals import worker_shutting_down

    from little_dist.fleet.queue import CeleryQueue
    from little_dist.fleet.refusals import SubmissionRefused

    runtime.queue = CeleryQueue(app, runtime.settings)

    def stop_continuing(**_: Any) -> None:
        runtime.stopping.set()
        runtime.fastpath.spares.send_all()

    # Kept by the runtime (signals hold weak references): a shutting-down worker finishes
    # its running attempts but sends their continuations to the queue.
    runtime._on_shutdown = stop_continuing
    worker_shutting_down.connect(stop_continuing)

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

    class SubmitRunTask(Task):  # type: ignore[misc]
        """The message's arguments go to the runtime as sent, before Python binds them to
        the signature: a misspelled one is a refusal like any other, not a TypeError."""

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return runtime.submit(args, kwargs, task_id=self.request.id)

    @app.task(  # type: ignore[untyped-decorator]
        name=TASK_SUBMIT_RUN,
        base=SubmitRunTask,
        bind=True,
        ignore_result=True,
        shared=False,
        # A refusal is the sender's mistake: FAILURE, logged in one line, not retried.
        throws=(SubmissionRefused,),
    )
    def submit_run(
        self: Task,
        workflow_id: str | None = None,
        lwir: dict[str, Any] | None = None,
        input: Any = None,
        run_id: str | None = None,
        budget_usd: float | None = None,
        deadline: str | None = None,
        timeout: str | float | None = None,
        max_attempts: int | None = None,
        callback_url: str | None = None,
    ) -> str:
        return runtime.submit(
            (),
            {
                "workflow_id": workflow_id,
                "lwir": lwir,
                "input": input,
                "run_id": run_id,
                "budget_usd": budget_usd,
                "deadline": deadline,
                "timeout": timeout,
                "max_attempts": max_attempts,
                "callback_url": callback_url,
            },
            task_id=self.request.id,
        )
