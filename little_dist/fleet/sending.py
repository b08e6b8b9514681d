"""Sending a run's tasks, once: the task names, the dispatch leases and the sends.

The scheduler, a client that starts a run and a worker's fast path may all look at the same
run at the same moment; none of that can send an attempt's task twice while the first
could still be delivered:

* before the task of attempt ``n`` of ``path`` is sent, the sender takes the lease
  :func:`dispatch_lease_key` (``{run}:dispatch:{path}:{n}``) for
  ``settings.dispatch_resend_after`` seconds under a holder unique to the call, and only the
  one that got it sends. The lease is never released: while it lives nobody sends that
  attempt again. If the attempt has still not started when it expires (the message was lost,
  a broker restart), whoever looks at the run next sends it again;
* a task delivered twice finds the step lease held (``busy``) or the attempt over
  (``already_done``): :func:`~little_dist.runtime.execute_step_attempt` fences every write.

Tasks carry ids only and go through a :class:`~little_dist.fleet.queue.TaskQueue`; a
sub-run's step tasks also name the parent run for Flower (:func:`send_dispatch`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from little_dist import occurrences
from little_dist.run_state import RUN_ENDED, RunState
from little_dist.scheduling import Decision, RunContext, StepDispatch
from little_dist.settings import Settings
from little_dist.world.base import Lease, LeaseRequest, World, unique_holder
from little_dist.world.fleet_keys import dispatch_lease_key as _dispatch_lease_key
from little_dist.world.fleet_keys import plan_dispatch_lease_key

if TYPE_CHECKING:
    from little_dist.fleet.queue import TaskQueue

__all__ = [
    "TASK_EXECUTE_STEP",
    "TASK_FIX_STEP",
    "TASK_ORCHESTRATE",
    "TASK_PLAN",
    "TASK_SUBMIT_RUN",
    "acquire_leases",
    "dispatch_lease_key",
    "dispatch_plan",
    "dispatch_ready",
    "dispatch_won",
    "schedule_occurrence",
    "send_dispatch",
    "task_name_for",
]

TASK_EXECUTE_STEP: Final = "little.execute_step"
TASK_FIX_STEP: Final = "little.fix_step"
TASK_PLAN: Final = "little.plan"
TASK_ORCHESTRATE: Final = "little.orchestrate"
TASK_SUBMIT_RUN: Final = "little.submit_run"


def dispatch_lease_key(dispatch: StepDispatch) -> str:
    """The lease whose holder alone may send ``dispatch``'s task."""
    return _dispatch_lease_key(dispatch.run_id, dispatch.step_path, dispatch.attempt)


def task_name_for(dispatch: StepDispatch) -> str:
    """``little.execute_step`` or ``little.fix_step``."""
    return TASK_FIX_STEP if dispatch.kind == "fix_step" else TASK_EXECUTE_STEP


def send_dispatch(queue: TaskQueue, dispatch: StepDispatch) -> None:
    """Send ``dispatch``'s task by name to its role's queue (ids only: no lease taken).

    The task of a sub-run's step also carries the note ``{'parentRunId': ...}`` (shown by
    Flower as its keyword arguments; the task takes none, see
    :mod:`~little_dist.fleet.queue`). A dispatch not to run yet (``not_before_ms``: after an
    attempt that gave its slot back for quota) is sent with that delay."""
    args = (dispatch.run_id, dispatch.step_path, dispatch.attempt)
    options: dict[str, Any] = {}
    if dispatch.parent_run_id is not None:
        options["note"] = {"parentRunId": dispatch.parent_run_id}
    if dispatch.not_before_ms is not None:
        wait = dispatch.not_before_ms / 1000 - time.time()
        if wait > 0:
            options["countdown"] = wait  # a quota wait: the task runs when quota is expected
    queue.send(task_name_for(dispatch), args, dispatch.role, **options)


def dispatch_ready(
    world: World,
    queue: TaskQueue,
    settings: Settings,
    ctx: RunContext,
    state: RunState,
    decision: Decision,
    *,
    holder: str = "dispatch",
) -> list[StepDispatch]:
    """Send the task of every attempt in ``decision.dispatch`` this call wins the lease for.

    ``decision`` must have been appended already (an attempt is sent only once its
    ``StepScheduled`` is in the log). Returns what was sent. ``holder`` names the sender in
    the lease (diagnostics); a unique suffix is added, so the same process does not re-send
    an attempt whose lease it still holds.
    """
    return dispatch_won(world, queue, settings, ctx, state, decision, holder=holder)[0]


def dispatch_won(
    world: World,
    queue: TaskQueue,
    settings: Settings,
    ctx: RunContext,
    state: RunState,
    decision: Decision,
    *,
    holder: str,
    keep: Callable[[StepDispatch], bool] | None = None,
) -> tuple[list[StepDispatch], StepDispatch | None]:
    """:func:`dispatch_ready`, except that the first won attempt ``keep`` accepts is not
    sent but returned (with the others sent first): the caller runs it itself, under the
    dispatch lease it now holds, exactly as a worker would that got its task."""
    sent: list[StepDispatch] = []
    if not decision.dispatch or state.status in RUN_ENDED:
        return sent, None
    me = unique_holder(holder)
    mine = [dispatch for dispatch in decision.dispatch if dispatch.run_id == ctx.run_id]
    leases = acquire_leases(
        world, [dispatch_lease_key(d) for d in mine], me, settings.dispatch_resend_after
    )
    won = [
        (dispatch, lease) for dispatch, lease in zip(mine, leases, strict=True) if lease is not None
    ]
    kept: StepDispatch | None = None
    if keep is not None:
        for index, (dispatch, _) in enumerate(won):
            if keep(dispatch):
                kept = dispatch
                del won[index]
                break
    for index, (dispatch, _) in enumerate(won):
        try:
            send_dispatch(queue, dispatch)
        except BaseException:
            # Not sent: let the next look at the run send these instead of waiting for
            # expiry.
            for _, unsent in won[index:]:
                world.release_lease(unsent)
            raise
        sent.append(dispatch)
    return sent, kept


def acquire_leases(
    world: World, keys: Sequence[str], holder: str, ttl_seconds: float
) -> list[Lease | None]:
    """:meth:`World.acquire_leases` of ``keys`` for one holder and TTL (one round trip on
    Redis), in order."""
    return world.acquire_leases([LeaseRequest(key, holder, ttl_seconds) for key in keys])


def dispatch_plan(
    world: World, queue: TaskQueue, settings: Settings, run_id: str, *, holder: str = "dispatch"
) -> bool:
    """Send ``little.plan(run_id)`` to the planner queue unless sent in the last
    ``dispatch_resend_after`` seconds (lease ``{run}:dispatch:plan``); whether it was sent."""
    lease = world.acquire_lease(
        plan_dispatch_lease_key(run_id),
        unique_holder(holder),
        settings.dispatch_resend_after,
    )
    if lease is None:
        return False
    try:
        queue.send(TASK_PLAN, (run_id,), "planner")
    except BaseException:
        world.release_lease(lease)
        raise
    return True


def schedule_occurrence(dispatch: StepDispatch) -> str:
    """The occurrence id of the ``StepScheduled`` that schedules ``dispatch`` (``decide``
    schedules first attempts: ``sched:{path}:1``)."""
    return occurrences.scheduled(dispatch.step_path, dispatch.attempt)
