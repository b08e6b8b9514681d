"""Fold a run, decide, append, and send one task per ready attempt — once.

Shared by the scheduler (``little scheduler``) and the worker fast path (a worker that just
committed a step advances its run itself, so a chain of steps does not wait for a scheduler
round trip). Both may look at the same run at the same moment; nothing here can make an
attempt run twice:

* ``decide`` is pure and its events carry deterministic occurrence ids, so appending the
  same decision twice records each fact once;
* before the task of attempt ``n`` of ``path`` is sent, the sender takes the lease
  :func:`dispatch_lease_key` (``{run}:dispatch:{path}:{n}``) for
  ``settings.dispatch_resend_after`` seconds under a holder unique to the call, and only the
  one that got it sends. The lease is never released: while it lives nobody sends that
  attempt again. If the attempt has still not started when it expires (the message was lost,
  a broker restart), whoever looks at the run next sends it again;
* a task delivered twice finds the step lease held (``busy``) or the attempt over
  (``already_done``): :func:`~little_dist.runtime.execute_step_attempt` fences every write.

:class:`RunTracker` keeps one run's folded state and :class:`~little_dist.scheduling.RunContext`
and folds only new events; :func:`advance_run` is one "look at the run" (fold, decide, append
until nothing new, dispatch). :class:`VersionCache` keeps compiled versions (immutable) by id.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from little_dist.compiler import WorkflowVersion
from little_dist.events import Event
from little_dist.run_state import RunState, RunStateBuilder
from little_dist.runtime import hydrate_events
from little_dist.scheduling import Decision, RunContext, StepDispatch, decide
from little_dist.settings import Settings
from little_dist.world.base import World, run_lease_key

if TYPE_CHECKING:
    from celery import Celery

__all__ = [
    "CANCEL_EVENT_TYPE",
    "SUBMITTED_EVENT_TYPE",
    "TASK_EXECUTE_STEP",
    "TASK_FIX_STEP",
    "TASK_ORCHESTRATE",
    "TASK_PLAN",
    "TASK_SUBMIT_RUN",
    "Advance",
    "RunTracker",
    "VersionCache",
    "advance_run",
    "dispatch_lease_key",
    "dispatch_plan",
    "dispatch_ready",
    "send_dispatch",
    "task_name_for",
]

TASK_EXECUTE_STEP: Final = "little.execute_step"
TASK_FIX_STEP: Final = "little.fix_step"
TASK_PLAN: Final = "little.plan"
TASK_ORCHESTRATE: Final = "little.orchestrate"
TASK_SUBMIT_RUN: Final = "little.submit_run"

#: Engine event asking a run to stop (``Client.cancel``, ``little cancel``); occurrence
#: ``cancel``. ``decide`` then fails the run with causeCode ``cancelled``.
CANCEL_EVENT_TYPE: Final = "little.run.cancel_requested"
#: Engine event recording a submission that still has to be planned (``little.plan``):
#: ``{workflowId, input}``, occurrence ``submit``. Appended before ``RunStarted``.
SUBMITTED_EVENT_TYPE: Final = "little.run.submitted"

# decide + append rounds per look at a run: decision steps are settled inline, each round
# may make the next one ready. Bounded so a bug cannot spin forever.
_MAX_ROUNDS: Final = 64


def dispatch_lease_key(dispatch: StepDispatch) -> str:
    """The lease whose holder alone may send ``dispatch``'s task."""
    return run_lease_key(dispatch.run_id, f"dispatch:{dispatch.step_path}:{dispatch.attempt}")


def task_name_for(dispatch: StepDispatch) -> str:
    """``little.execute_step`` or ``little.fix_step``."""
    return TASK_FIX_STEP if dispatch.kind == "fix_step" else TASK_EXECUTE_STEP


def send_dispatch(app: Celery, settings: Settings, dispatch: StepDispatch) -> None:
    """Send ``dispatch``'s task by name to its role's queue (ids only: no lease taken)."""
    app.send_task(
        task_name_for(dispatch),
        args=(dispatch.run_id, dispatch.step_path, dispatch.attempt),
        queue=settings.queue_for(dispatch.role),
    )


def dispatch_ready(
    world: World,
    app: Celery,
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
    sent: list[StepDispatch] = []
    if not decision.dispatch or state.status in ("completed", "failed"):
        return sent
    me = f"{holder}:{uuid.uuid4().hex[:12]}"
    for dispatch in decision.dispatch:
        if dispatch.run_id != ctx.run_id:
            continue
        lease = world.acquire_lease(
            dispatch_lease_key(dispatch), me, settings.dispatch_resend_after
        )
        if lease is None:
            continue  # sent by someone else less than dispatch_resend_after ago
        try:
            send_dispatch(app, settings, dispatch)
        except BaseException:
            # Not sent: let the next look at the run send it instead of waiting for expiry.
            world.release_lease(lease)
            raise
        sent.append(dispatch)
    return sent


def dispatch_plan(
    world: World, app: Celery, settings: Settings, run_id: str, *, holder: str = "dispatch"
) -> bool:
    """Send ``little.plan(run_id)`` to the planner queue unless sent in the last
    ``dispatch_resend_after`` seconds (lease ``{run}:dispatch:plan``); whether it was sent."""
    lease = world.acquire_lease(
        run_lease_key(run_id, "dispatch:plan"),
        f"{holder}:{uuid.uuid4().hex[:12]}",
        settings.dispatch_resend_after,
    )
    if lease is None:
        return False
    try:
        app.send_task(TASK_PLAN, args=(run_id,), queue=settings.queue_for("planner"))
    except BaseException:
        world.release_lease(lease)
        raise
    return True


class VersionCache:
    """Compiled workflow versions by id (they are immutable), bounded, thread-safe."""

    def __init__(self, size: int = 256) -> None:
        self._size = size
        self._versions: OrderedDict[str, WorkflowVersion] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, world: World, version_id: str) -> WorkflowVersion:
        with self._lock:
            found = self._versions.get(version_id)
            if found is not None:
                self._versions.move_to_end(version_id)
                return found
        version = WorkflowVersion.from_json(world.get_version(version_id))
        with self._lock:
            self._versions[version_id] = version
            while len(self._versions) > self._size:
                self._versions.popitem(last=False)
        return version


class RunTracker:
    """One run's folded state and :class:`RunContext`, brought up to date incrementally.

    :meth:`catch_up` reads only the events after the last one folded. ``context`` is
    ``None`` until ``RunStarted`` is recorded (a run still being planned).
    """

    def __init__(
        self,
        world: World,
        run_id: str,
        *,
        versions: VersionCache | None = None,
        max_branches_cap: int | None = None,
    ) -> None:
        self.world = world
        self.run_id = run_id
        self.versions = versions if versions is not None else VersionCache()
        self.max_branches_cap = max_branches_cap
        self._builder = RunStateBuilder(run_id)
        self._version_id: str | None = None
        self._run_input: Any = None
        self._started = False
        self._submitted = False
        self._cancel_requested = False
        self._context: RunContext | None = None
        self._lock = threading.Lock()

    @property
    def last_sequence(self) -> int:
        """The sequence of the last event folded."""
        return self._builder.event_count

    @property
    def context(self) -> RunContext | None:
        return self._context

    @property
    def cancel_requested(self) -> bool:
        return self._cancel_requested

    @property
    def awaiting_plan(self) -> bool:
        """Submitted for planning (``little.run.submitted``) and not started yet."""
        return self._submitted and not self._started

    def state(self) -> RunState:
        return self._builder.snapshot()

    def catch_up(self) -> RunState:
        """Fold the events recorded since the last call; the current state."""
        with self._lock:
            events = self.world.list_events(self.run_id, after=self._builder.event_count)
            self._fold(events)
            return self._builder.snapshot()

    def fold(self, events: Sequence[Event]) -> None:
        """Fold ``events`` that directly follow the folded ones (others are read again)."""
        with self._lock:
            fresh = [e for e in events if e.sequence > self._builder.event_count]
            if fresh and fresh[0].sequence == self._builder.event_count + 1:
                self._fold(fresh)

    def _fold(self, events: Sequence[Event]) -> None:
        if not events:
            return
        changed = False
        for event in events:
            if event.type == "RunStarted":
                self._started = True
                version_id = event.payload.get("workflowVersionId")
                self._version_id = version_id if isinstance(version_id, str) else None
                self._run_input = event.payload.get("input")
                changed = True
            elif event.type == SUBMITTED_EVENT_TYPE:
                self._submitted = True
            elif event.type == CANCEL_EVENT_TYPE and not self._cancel_requested:
                self._cancel_requested = True
                changed = True
        self._builder.apply_all(hydrate_events(self.world, events))
        if changed:
            self._refresh_context()

    def _refresh_context(self) -> None:
        if self._context is not None:
            # Keep the context's identity (decide caches per-run work on it) unless the
            # cancel flag changed.
            if self._context.cancel_requested != self._cancel_requested:
                self._context = dataclasses.replace(
                    self._context, cancel_requested=self._cancel_requested
                )
            return
        if not self._started or self._version_id is None:
            return
        if not self._version_id.startswith("wfver_"):
            return  # planning failed: RunStarted names no compiled version
        version = self.versions.get(self.world, self._version_id)
        self._context = RunContext(
            version=version,
            run_input=self._run_input,
            run_id=self.run_id,
            max_branches_cap=self.max_branches_cap,
            cancel_requested=self._cancel_requested,
        )


@dataclass(frozen=True)
class Advance:
    """What one :func:`advance_run` did: the final state and decision, what it sent."""

    state: RunState
    decision: Decision | None
    sent: tuple[StepDispatch, ...]
    appended: int

    @property
    def done(self) -> bool:
        """The run is over (RunCompleted/RunFailed recorded)."""
        return self.state.status in ("completed", "failed")


def advance_run(
    world: World,
    app: Celery,
    settings: Settings,
    tracker: RunTracker,
    *,
    holder: str = "dispatch",
) -> Advance:
    """Fold new events, decide and append until nothing new, then dispatch what is ready.

    Safe to call from any number of processes at once (see the module docstring). A run
    already over is only folded. A run submitted for planning and not started gets its
    ``little.plan`` task (re)sent under the lease :func:`dispatch_plan` takes.
    """
    state = tracker.catch_up()
    if tracker.awaiting_plan and state.status not in ("completed", "failed"):
        dispatch_plan(world, app, settings, tracker.run_id, holder=holder)
        return Advance(state, None, (), 0)
    decision: Decision | None = None
    appended = 0
    for _ in range(_MAX_ROUNDS):
        ctx = tracker.context
        if ctx is None or state.status in ("completed", "failed"):
            return Advance(state, decision, (), appended)
        decision = decide(ctx, state)
        if not decision.events:
            break
        last = tracker.last_sequence
        recorded = world.append_batch(tracker.run_id, list(decision.events))
        new = [event for event in recorded if event.sequence > last]
        appended += len(new)
        tracker.fold(recorded)
        state = tracker.catch_up()
        if not new:
            break
    ctx = tracker.context
    if decision is None or ctx is None:
        return Advance(state, decision, (), appended)
    sent = dispatch_ready(world, app, settings, ctx, state, decision, holder=holder)
    return Advance(state, decision, tuple(sent), appended)
