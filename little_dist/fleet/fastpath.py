"""The worker's fast path: advance the run after a commit, and run what it keeps in the slot.

The spine (:mod:`~little_dist.fleet.worker`) runs one attempt per delivered task and leaves
what comes next to the scheduler. The fast path is everything a worker does beyond that, at
one seam of the spine (:meth:`FastPath.arrange`, before an attempt; :meth:`Arranged.next`,
after its commit; :meth:`FastPath.run_kept`, after the task's own attempt):

* **a chain's next step in the same slot.** The commit of a step takes the step lease of the
  step that most likely runs next (:meth:`FastPath.successor`, in the commit's round trip);
  the look after the commit (:func:`~little_dist.fleet.dispatch.advance_run` with a
  :class:`~little_dist.fleet.dispatch.Keep`) keeps that step, records its schedule with its
  first append (deferred), and the task runs it inline, bounded by the inline budget;
* **a fan-out's refills in the slots that freed them.** Threads of one process that commit
  branches of one run at once advance it once (:class:`~little_dist.fleet.advancing.Advancing`):
  the advancing thread keeps a pool's worth of refills and hands them out to the threads
  waiting; the others wait as spares (:mod:`~little_dist.fleet.spares`) for the threads about
  to ask, and go to the queue if none asks in time;
* **yielding.** A slot whose inline budget ran out gives its next attempt to the queue only
  when other work waits there (:meth:`FastPath.yields`); every task stops after
  ``worker_inline_max_seconds``; a worker shutting down hands everything it kept back.

Nothing depends on it for correctness: every step lease and dispatch lease is taken as on
the spine, and a worker that dies between its commit and its look is covered by the
scheduler's sweep. ``little worker --no-fast-path`` turns it off (:attr:`FastPath.enabled`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from little_dist.errors import LeaseLostError, LittleError
from little_dist.events import EventInput
from little_dist.fleet.dispatch import Advance, Keep, KeptAttempt, advance_run, decision_of
from little_dist.fleet.run_tracker import RunTracker
from little_dist.fleet.sending import schedule_occurrence, send_dispatch
from little_dist.fleet.spares import SPARE_SECONDS, SpareSender
from little_dist.run_state import RUN_ENDED
from little_dist.runtime import AttemptOutcome, Continuation
from little_dist.scheduling import RunContext, StepDispatch
from little_dist.scheduling.step_graph import next_in_chain, plan_for
from little_dist.world.base import Lease, LeaseRequest, unique_holder
from little_dist.world.fleet_keys import step_lease_key

if TYPE_CHECKING:
    from little_dist.compiler import WorkflowVersion
    from little_dist.fleet.worker import WorkerRuntime

__all__ = ["Arranged", "FastPath"]

_log = logging.getLogger("little.worker")

# What an attempt that committed reports (``WorkerRuntime.attempt`` gives the value).
_COMMITTED = frozenset(outcome.value for outcome in AttemptOutcome if outcome.committed)
# How long a thread that committed a step waits for the thread advancing the run to hand it
# an attempt (the advance takes milliseconds; this only bounds a stuck one).
_HANDOUT_WAIT_S = 0.25
# (version id, step path) -> the chain's next step, remembered per process.
_SUCCESSOR_CACHE_SIZE = 4096


@dataclass
class Arranged:
    """What the fast path arranged for one attempt: how it runs (:attr:`continuation`) and
    what follows its commit (:meth:`next`)."""

    fast: FastPath
    tracker: RunTracker
    continuation: Continuation
    successor: str | None = None
    #: The lease of ``successor`` the commit took (at most one).
    taken: list[Lease] = field(default_factory=list)

    def next(self, *, committed: bool, current: bool) -> Advance | None:
        """After the attempt: ``None``, or the advance that kept this worker's next attempt
        (run it inline with :meth:`FastPath.run_kept`). ``committed``: the attempt ended
        (completed or failed) in this call; ``current``: the tracker folded the commit and
        nothing came in between (the look need not read)."""
        held = self.taken[0] if self.taken else None
        runtime = self.fast._runtime
        if not committed:
            runtime.release(held)
            return None
        keep = self.fast._keeps if runtime.settings.worker_inline_steps > 0 else None
        try:
            advance = runtime.advance(self.tracker, keep=keep, read=not current, held=held)
        except BaseException:
            runtime.release(held)
            raise
        if held is not None and (advance is None or advance.kept_lease is not held):
            runtime.release(held)  # the next step was not ours to run after all
            if self.successor is not None:
                self.fast._send_unstarted(self.tracker, self.successor)
        if advance is not None and advance.done:
            runtime.runs.forget(self.tracker.run_id)
        if advance is None or advance.kept is None:
            return None
        return advance


class FastPath:
    """The fast path of one worker process; see the module docstring. ``clock``: what
    :meth:`yields` reads the time from (monotonic seconds)."""

    def __init__(
        self, runtime: WorkerRuntime, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._runtime = runtime
        self._clock = clock
        self._lock = threading.Lock()
        self._successors: dict[tuple[str, str], str | None] = {}
        #: Sends the spare attempts no thread of this process took in time.
        self.spares = SpareSender(self.hand_off)
        # When a thread of this process last gave up its inline budget to the queue while
        # the queue seemed to hold only its own run's tasks (see :meth:`yields`).
        self._last_yield = clock()

    def arrange(
        self,
        tracker: RunTracker,
        ctx: RunContext,
        step_path: str,
        lease: Lease | None,
        continued: Advance | None,
    ) -> Arranged:
        """How the attempt of ``step_path`` runs: under ``lease`` (the spine's, or the one
        the look that kept it took: ``continued``), without a second read when nobody else
        can have run it, with the kept attempt's deferred schedule, taking the chain's next
        step lease with its commit, and waking the scheduler only when the fast path is off.
        """
        successor = self.successor(ctx.version, step_path)
        run_id = tracker.run_id
        runtime = self._runtime
        next_lease = (
            LeaseRequest(
                step_lease_key(run_id, successor),
                unique_holder(runtime.name),
                runtime.settings.lease_ttl,
            )
            if successor is not None
            else None
        )
        arranged = Arranged(self, tracker, Continuation(), successor)
        arranged.continuation = Continuation(
            lease=lease,
            # Read under the step lease, or leased before it was scheduled (nobody else can
            # have run it): no second read.
            read_log=not continued.kept_alone if continued is not None else False,
            # The StepScheduled this worker decided for it rides with its first append.
            preamble=continued.deferred if continued is not None else (),
            next_lease=next_lease,
            on_next_lease=arranged.taken.append,
            # The fast path advances the run right after the commit: the scheduler need not
            # look too (its sweep covers a worker that dies in between).
            signal=not self.enabled,
        )
        return arranged

    def run_kept(self, kept: Advance, started: float) -> None:
        """Run ``kept`` (the next attempt the task's own commit kept) and what each commit
        keeps after it, in this slot, while the inline budget lasts (see :meth:`yields`);
        then hand the next one to its queue. ``started``: when the task began (monotonic)."""
        runtime = self._runtime
        settings = runtime.settings
        deadline = time.monotonic() + settings.worker_inline_seconds
        steps = 0
        current: Advance | None = kept
        while current is not None:
            steps += 1
            now = time.monotonic()
            spent = steps > settings.worker_inline_steps or now > deadline
            over = now - started > settings.worker_inline_max_seconds
            if runtime.stopping.is_set() or over or (spent and self.yields(current)):
                self.hand_off(current)
                return
            if spent:
                # Nothing else waits for this slot: a new budget, not a broker round trip.
                deadline = time.monotonic() + settings.worker_inline_seconds
                steps = 1
            step = current.kept
            assert step is not None
            try:
                outcome, following = runtime.attempt(
                    step.run_id, step.step_path, step.attempt, step.kind, continued=current
                )
                if following is None and outcome not in _COMMITTED:
                    following = self._look_if_owed(step.run_id)
            except Exception:
                # The task's own attempt is committed: the continuation goes back to the
                # queue (the worker that gets it finds it busy, done, or to be continued).
                _log.exception(
                    "%s %s %s#%d (inline) raised; sending it to the queue",
                    step.kind,
                    step.run_id,
                    step.step_path,
                    step.attempt,
                )
                self.hand_off(current)  # (releasing a lease already released is harmless)
                return
            current = following

    def _look_if_owed(self, run_id: str) -> Advance | None:
        """After an inline attempt that committed nothing (it found itself done, or busy):
        look at the run if no look of this process has decided on all it folded, and
        return the attempt that look kept for this slot, if any.

        The commit before it may be one nobody looked at: its thread took this attempt as
        a spare, kept by a look that folded other threads' commits, counting on this
        attempt's own commit to look. Without this look, that commit's branch end (the
        fan-out's last, say) waited for the scheduler's sweep."""
        runtime = self._runtime
        if run_id not in runtime.runs:
            return None  # (forgotten: the run is over)
        tracker = runtime.runs.get(run_id)
        if tracker.looked_past(tracker.last_sequence):
            return None
        keep = self._keeps if runtime.settings.worker_inline_steps > 0 else None
        advance = runtime.advance(tracker, keep=keep)
        if advance is not None and advance.done:
            runtime.runs.forget(run_id)
        if advance is None or advance.kept is None:
            return None
        return advance

    @property
    def enabled(self) -> bool:
        """Whether the worker advances runs itself after its commits (it needs a queue)."""
        return self._runtime.fast_path and self._runtime.queue is not None

    def yields(self, kept: Advance) -> bool:
        """Whether a slot whose inline budget ran out gives its next attempt (``kept``) to
        the queue: yes when the queue holds tasks beyond this run's attempts waiting to
        start (another run's, surely), or its length is unknown; no when it is empty (the
        slot would only take the same attempt back) or holds no more than those attempts
        (a wide fan-out's own window: yielding would only swap one branch for another, at
        the cost of a send and a delivery), except that one slot of this process yields
        per ``worker_inline_seconds`` anyway, in case another run's task hides among them.
        """
        dispatch = kept.kept
        if dispatch is None:
            return True
        queued = self._runtime.queued_tasks(dispatch.role)
        if queued is None:
            return True
        if queued == 0:
            return False
        decision = kept.decision
        waiting = (
            sum(
                1
                for other in decision.dispatch
                if other.run_id == dispatch.run_id and other.role == dispatch.role
            )
            if decision is not None
            else 0
        )
        if queued > waiting:
            return True
        now = self._clock()
        with self._lock:
            if now - self._last_yield < self._runtime.settings.worker_inline_seconds:
                return False
            self._last_yield = now
        return True

    def successor(self, version: WorkflowVersion, step_path: str) -> str | None:
        """The step this worker will most likely run right after ``step_path`` commits: the
        one top-level step of its roles that needs exactly that step (a chain's next link);
        ``None`` when the fast path or the eager continuation is off, or there is none."""
        if (
            not self.enabled
            or self._runtime.settings.worker_inline_steps <= 0
            or "worker" not in self._runtime.roles
        ):
            return None
        key = (version.id, step_path)
        with self._lock:
            if key in self._successors:
                return self._successors[key]
        found = next_in_chain(plan_for(version), step_path)
        with self._lock:
            if len(self._successors) >= _SUCCESSOR_CACHE_SIZE:
                self._successors.clear()
            self._successors[key] = found
        return found

    def _keeps(self, dispatch: StepDispatch) -> bool:
        """Whether this worker may run ``dispatch`` itself: an attempt of one of its roles."""
        return dispatch.role in self._runtime.roles

    def advance(
        self,
        tracker: RunTracker,
        *,
        force: bool = False,
        keep: Callable[[StepDispatch], bool] | None = None,
        read: bool = True,
        held: Lease | None = None,
    ) -> Advance | None:
        """The fast path (``None`` when off or failed: failures are left to the scheduler).

        Threads of this process that commit steps of one run at once advance it once: a
        thread that finds another advancing the run leaves it to that one (which looks
        again when it is done) and gets ``None``, or the attempt that one hands it.
        """
        if (not self._runtime.fast_path and not force) or self._runtime.queue is None:
            return None
        if keep is not None:
            if held is None and not self._runtime.stopping.is_set():
                # A look that folded this thread's commit may have kept its next attempt.
                spare = tracker.spares.take()
                if spare is not None:
                    return spare
            waiter = tracker.advancing.join()
            if waiter is not None:
                # Another thread advances the run: it may hand this one an attempt it keeps
                # (a fan-out's next branch), which then runs here, without the broker.
                waiter.wait(_HANDOUT_WAIT_S)
                return tracker.advancing.leave(waiter)
        elif not tracker.advancing.begin():
            return None
        return self._advance_while_asked(tracker, keep, read, held)

    def _advance_while_asked(
        self,
        tracker: RunTracker,
        keep: Callable[[StepDispatch], bool] | None,
        read: bool,
        held: Lease | None,
    ) -> Advance | None:
        """Look at the run (this thread advances it), again for as long as other threads'
        commits ask for another look; the advance with this thread's next attempt, if one
        was kept for it. The other attempts kept go to waiting threads or become spares."""
        kept: Advance | None = None
        try:
            while True:
                advance = self._look(tracker, keep, kept, read=read, held=held)
                kept = self._share_kept(tracker, advance, kept)
                read = True
                if advance.done or not tracker.advancing.end():
                    break
                if kept is not None and kept.deferred:
                    # Looking again: the next decision must see the kept attempt scheduled.
                    tracker.fold(
                        self._runtime.world.append_batch(
                            tracker.run_id, list(kept.deferred), signal=False
                        )
                    )
                    kept = dataclasses.replace(kept, deferred=())
        except LittleError as error:
            tracker.advancing.end(failed=True)
            if kept is not None:
                self.hand_off(kept)
            _log.warning(
                "fast path for %s: %s (the scheduler will catch up)",
                tracker.run_id,
                error,
                exc_info=True,
            )
            return None
        except BaseException:
            tracker.advancing.end(failed=True)
            if kept is not None:
                self._runtime.release(kept.kept_lease)
            raise
        if advance.done:
            tracker.advancing.end(failed=True)  # nothing more to look at
        if kept is None or (kept is advance and not advance.also):
            return advance  # (nothing kept, or only this thread's next attempt, as it is)
        return dataclasses.replace(
            advance,
            kept=kept.kept,
            kept_alone=kept.kept_alone,
            kept_lease=kept.kept_lease,
            deferred=kept.deferred,
            also=(),
        )

    def _look(
        self,
        tracker: RunTracker,
        keep: Callable[[StepDispatch], bool] | None,
        kept: Advance | None,
        *,
        read: bool,
        held: Lease | None,
    ) -> Advance:
        """One look at the run, keeping this thread's next attempt (unless ``kept`` is it
        already) and one for each thread of this process waiting for one."""
        # The threads whose commits this look folds are usually a moment away from asking:
        # up to a pool's worth of attempts are kept (the rest go out now).
        wanted = (
            0
            if keep is None
            else max(
                (kept is None) + tracker.advancing.waiting(),
                self._runtime.settings.worker_concurrency,
            )
        )
        queue = self._runtime.queue
        assert queue is not None  # (the fast path is on)
        return advance_run(
            self._runtime.world,
            queue,
            self._runtime.settings,
            tracker,
            holder=self._runtime.name,
            read=read,
            keep=(
                Keep(
                    keep,
                    want=max(wanted, 1),
                    defer=kept is None,
                    held=held if kept is None else None,
                )
                if keep is not None and wanted
                else None
            ),
        )

    def _share_kept(
        self, tracker: RunTracker, advance: Advance, kept: Advance | None
    ) -> Advance | None:
        """What ``advance`` kept: the first attempt for this thread (if it has none yet),
        the others for the threads of this process; this thread's next attempt."""
        others = list(advance.also)
        if advance.kept is not None:
            if kept is None:
                kept = advance
            elif advance.kept_lease is not None:
                others.insert(0, KeptAttempt(advance.kept, advance.kept_lease, advance.kept_alone))
            else:
                # Kept under its dispatch lease (it was scheduled before): this thread has
                # its next attempt already, so the task goes out.
                self.hand_off(dataclasses.replace(advance, also=()))
        if others:
            self._hand_out(tracker, advance, others)
        return kept

    def _hand_out(self, tracker: RunTracker, advance: Advance, kept: list[KeptAttempt]) -> None:
        """Give attempts this look kept to threads of this process waiting for one; keep
        the rest as spares for the next threads that ask (sent to their queues if none
        does in time)."""
        attempts = [
            dataclasses.replace(
                advance,
                kept=item.dispatch,
                kept_alone=item.alone,
                kept_lease=item.lease,
                deferred=(),
                also=(),
            )
            for item in kept
        ]
        left = tracker.advancing.hand_out(attempts)
        if not left:
            return
        if self._runtime.stopping.is_set():
            for attempt in left:
                self.hand_off(attempt)
            return
        # Threads whose commits this look folded are usually a moment away from asking for
        # an attempt: the rest waits for them as spares (see little_dist.fleet.spares), and
        # goes to the broker if none asks in time.
        until = time.monotonic() + SPARE_SECONDS
        tracker.spares.stash(left, until)
        self.spares.watch(tracker, until)

    def hand_off(self, advance: Advance) -> None:
        """Send a kept attempt to its queue, freeing the step lease taken for it (best
        effort: if this fails, the scheduler's sweep sends it)."""
        dispatch = advance.kept
        if self._runtime.queue is None or dispatch is None:
            return
        try:
            if advance.deferred:  # scheduled in the log before its task goes out
                self._append_releasing(dispatch.run_id, list(advance.deferred), advance.kept_lease)
            else:
                self._runtime.release(advance.kept_lease)
            send_dispatch(self._runtime.queue, dispatch)
        except Exception:
            _log.exception(
                "could not send %s %s#%d; the scheduler will",
                dispatch.run_id,
                dispatch.step_path,
                dispatch.attempt,
            )

    def _append_releasing(
        self, run_id: str, deferred: list[EventInput], lease: Lease | None
    ) -> None:
        """Append ``deferred`` and give back ``lease`` in the same round trip (a fenced
        append that releases); if the lease is no longer held (it lapsed, or was given back
        already), the append alone, as nobody's."""
        world = self._runtime.world
        if lease is not None:
            try:
                world.append_batch(run_id, deferred, signal=False, fence=lease.fence, release=True)
                return
            except LeaseLostError:
                pass
        world.append_batch(run_id, deferred, signal=False)

    def _send_unstarted(self, tracker: RunTracker, step_path: str) -> None:
        """After giving back the unused lease this thread's commit took on ``step_path``: if
        that step is scheduled and its attempt has not started, send its task.

        Whoever scheduled it meanwhile (another thread of this process advancing the run,
        another worker) found it leased, by us, and left it to us: without this it would
        wait for its dispatch lease to expire and a sweep. A second task for it finds the
        step busy or done.
        """
        if self._runtime.queue is None:
            return
        try:
            state = tracker.catch_up()
            decision = None if state.status in RUN_ENDED else decision_of(tracker, state)
            if decision is None:
                return
            scheduling = {e.occurrence_id for e in decision.events if e.type == "StepScheduled"}
            for dispatch in decision.dispatch:
                if dispatch.step_path != step_path:
                    continue
                # (one this decision would schedule is not yet: the look deciding it sends it)
                if schedule_occurrence(dispatch) not in scheduling:
                    send_dispatch(self._runtime.queue, dispatch)
        except LittleError as error:
            _log.warning(
                "could not look at %s %s again: %s (the scheduler will)",
                tracker.run_id,
                step_path,
                error,
                exc_info=True,
            )
