"""The ``little scheduler`` process: signals in, decisions appended, tasks out.

One loop, one thread:

1. **Signals.** Every new event of a run adds ``run=<id>`` to the signal stream (the world's
   append script does it atomically). The scheduler reads the stream through a consumer group
   (:class:`~little_dist.fleet.signals.SignalReader`: ``XREADGROUP ... BLOCK``), so several
   schedulers share the work; entries idle longer than ``signal_claim_idle`` in a dead
   scheduler's pending list are taken over with ``XAUTOCLAIM``. A batch of entries is grouped
   by run, each run is looked at once, then the batch is acknowledged (``XACK``).
2. **A look at a run** (:meth:`Scheduler.advance`): fold only the new events into the run's
   cached :class:`~little_dist.fleet.run_tracker.RunTracker` (kept in
   :class:`~little_dist.fleet.followed_runs.FollowedRuns`; state + ``RunContext``; large
   outputs hydrated; ``little.run.cancel_requested`` sets ``cancel_requested``), call the pure
   ``decide``, append ``decision.events`` in ONE ``append_batch`` (idempotent by occurrence
   id; repeated while deciding again yields more, e.g. inline decision steps), then send the
   new dispatches under the dispatch leases: all of it is
   :func:`~little_dist.fleet.dispatch.advance_run`, the one loop every look at a run runs
   (the scheduler's without claims). Attempts this process already sent are not offered again until
   ``dispatch_resend_after`` has passed (a lease round trip saved per pending attempt per
   look); after that the lease decides whether the task is sent again.
3. **Sweeps** (:mod:`~little_dist.fleet.sweeper`): every few seconds, the scheduler holding the
   sweep lease looks at every active run again and fails attempts whose worker died
   (``lease_expired``), a few runs per loop turn so signals are still served in between. A
   run whose log grew since the last sweep looked at it is left to the workers moving it on,
   never twice in a row (:meth:`~little_dist.fleet.followed_runs.FollowedRuns.moving`).
4. **The end of a run**: its callback, if it has one, is sent in the background
   (:mod:`~little_dist.fleet.callbacks`; the run is archived once its outcome is recorded).
   Once ``RunCompleted``/``RunFailed`` is recorded, the runs linked to
   it hear of it (:mod:`~little_dist.fleet.sub_runs`: a parent's open children get a cancel
   request; a sub-run's parent gets ``little.subrun.ended``, with the other ends of the
   batch in one append per parent, before the batch is acknowledged, and is looked at
   right after, so that the last end resumes it without waiting for its signal), then it
   is dropped from the cache and archived on a background thread (``world.archive_run``
   where the world has it), then removed from the active set. A look that would have more than
   ``_UNREAD_END_PEEK`` unread events to fold (a wide run the workers ran to its end on the
   fast path, between two sweeps) first reads the log's last event: when that is the end,
   the run is finished from it alone, without folding the rest.
5. **Schedules** (:mod:`~little_dist.fleet.schedules`): every ``LITTLE_SCHEDULE_POLL``
   seconds, the ticks that came are started, once however many schedulers run.
6. **A run that cannot be advanced** (a look keeps raising) is failed as ``internal`` after a
   few looks in a row (:mod:`~little_dist.fleet.poison`).

Stopping: :meth:`Scheduler.stop` (the CLI calls it on SIGTERM/SIGINT) ends the loop after
the current turn; nothing is left half done (an unacknowledged entry is simply handled again
by someone, idempotently). One JSON log line (:mod:`~little_dist.fleet.scheduler_log`) per
decision that changed something: the run, events appended, tasks sent, the run's status and
the time taken.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from little_dist.errors import (
    LittleError,
    StorageUnavailableError,
)
from little_dist.fleet.archiving import Archiver
from little_dist.fleet.callbacks import Callbacks
from little_dist.fleet.dispatch import Advance, advance_run, past_deadline
from little_dist.fleet.followed_runs import FollowedRun, FollowedRuns
from little_dist.fleet.poison import PoisonRuns
from little_dist.fleet.scheduler_log import log_event as _log
from little_dist.fleet.schedules import ScheduleTicks
from little_dist.fleet.sending import dispatch_plan
from little_dist.fleet.signals import Signal, SignalReader
from little_dist.fleet.sub_runs import ParentNotices, cancel_open_children, notice_run_end
from little_dist.fleet.sweeper import ActiveRuns, SweepRound, fail_dead_attempts
from little_dist.fleet.versions import VersionCache
from little_dist.fleet.worker_slots import fanout_window
from little_dist.ids import SUB_RUN_ID_PREFIX
from little_dist.run_state import RUN_ENDED, RunState
from little_dist.settings import Settings
from little_dist.world.base import World
from little_dist.world.fleet_keys import active_runs_key, sweep_lease_key

if TYPE_CHECKING:
    import redis

    from little_dist.fleet.queue import TaskQueue

__all__ = [
    "Scheduler",
    "default_scheduler_name",
    "default_sweep_interval",
]

# A look with more unread events than this reads the last one first (see the docstring, 4.).
_UNREAD_END_PEEK: Final = 256
_END_STATUS: Final = {"RunCompleted": "completed", "RunFailed": "failed"}
_CONSUMER_CLEANUP_EVERY: Final = 600.0


def default_scheduler_name() -> str:
    """``<hostname>:<pid>``: unique per process, readable in ``XINFO CONSUMERS``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def default_sweep_interval(settings: Settings) -> float:
    """Half the shortest of the lease TTL and the resend delay, between 0.5 s and 5 s."""
    return max(0.5, min(5.0, min(settings.lease_ttl, settings.dispatch_resend_after) / 2))


class Scheduler:
    """The scheduler loop over one world, one task queue and the signal stream's Redis.

    Dependencies come in ready made (``little scheduler`` wires them from the settings:
    :mod:`little_dist.cli.scheduler_cmd`): a
    ``world`` (a :class:`~little_dist.world.redis_s3.RedisS3World` whose ``signal_stream``
    is ``settings.signal_stream``), ``queue`` (a :class:`~little_dist.fleet.queue.TaskQueue`) and
    ``redis_client`` (the Redis holding the signal stream; its socket timeout must exceed
    ``block_ms``). Drive it with :meth:`run` (until :meth:`stop`), or step by step with
    :meth:`start` and :meth:`run_once`.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        world: World,
        queue: TaskQueue,
        redis_client: redis.Redis,
        name: str | None = None,
        sweep_interval: float | None = None,
        read_count: int = 256,
        block_ms: int = 1000,
        sweep_batch: int = 25,
        max_cached_runs: int = 10_000,
        owns_clients: bool = False,
    ) -> None:
        self.settings = settings
        self._redis = redis_client
        self._owns_clients = owns_clients
        self.world = world
        self.queue = queue
        self.name = name or default_scheduler_name()
        self.signals = SignalReader(
            redis_client,
            settings.signal_stream,
            settings.signal_group,
            self.name,
            claim_idle=settings.signal_claim_idle,
        )
        self.active = ActiveRuns(redis_client, active_runs_key(settings.signal_stream))
        #: The fleet's cap on a fan-out's branches in flight, and its backlog (see
        #: :mod:`little_dist.fleet.worker_slots`); ``None`` with LITTLE_BRANCH_WINDOW=declared.
        self.window = fanout_window(settings, client=redis_client)
        self.sweeps = SweepRound(
            world,
            sweep_lease_key(settings.signal_stream),
            self.name,
            interval=default_sweep_interval(settings) if sweep_interval is None else sweep_interval,
        )
        self.versions = VersionCache(max_bytes=settings.version_cache_bytes)
        self.read_count = read_count
        self.block_ms = block_ms
        self.sweep_batch = sweep_batch
        self.max_cached_runs = max_cached_runs
        #: The runs this scheduler follows (folded, bounded; see :mod:`~.followed_runs`).
        self.runs = FollowedRuns(
            world,
            versions=self.versions,
            max_runs=max_cached_runs,
            max_bytes=settings.run_cache_bytes,
            max_branches_cap=settings.max_branches_cap,
            window=self.window,
        )
        #: Looks in a row that raised, per run (see :mod:`~.poison`).
        self.poison = PoisonRuns(world)
        #: Runs' callbacks, sent as they end (see :mod:`~little_dist.fleet.callbacks`).
        self.callbacks = Callbacks(world, settings, self.name)
        self.finished = Archiver(
            world,
            self.active,
            delay=settings.archive_delay,
            window=self.window,
            deliver=self.callbacks.start,
        )
        #: Schedules' ticks: started here as they come (see :mod:`~little_dist.fleet.schedules`).
        self.ticks = ScheduleTicks(
            settings, world=world, queue=queue, redis_client=redis_client, holder=self.name
        )
        self._stop = threading.Event()
        self._claim_every = max(0.1, min(settings.signal_claim_idle / 2, 5.0))
        self._next_claim = 0.0
        self._next_cleanup = time.monotonic() + _CONSUMER_CLEANUP_EVERY
        self._started = False

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Create the consumer group if missing, rebuild the active set if missing, and
        handle the entries this consumer name left unacknowledged (a restart)."""
        self.signals.ensure_group()
        rebuilt = self.active.rebuild_if_missing(self.world)
        _log(
            "scheduler-started",
            name=self.name,
            stream=self.signals.stream,
            group=self.signals.group,
            rebuilt_active_runs=rebuilt,
        )
        self._started = True
        while not self._stop.is_set():
            pending = self.signals.own_pending(self.read_count)
            if not pending:
                break
            self.handle(pending)

    def run(self) -> None:
        """Serve until :meth:`stop`; storage outages are logged and waited out."""
        backoff = 0.5
        while not self._stop.is_set():
            try:
                if not self._started:
                    self.start()
                self.run_once()
                backoff = 0.5
            except StorageUnavailableError as exc:
                _log("storage-unavailable", level=logging.WARNING, exc_info=exc, error=str(exc))
                if "NOGROUP" in str(exc):
                    self._started = False  # the stream or group was deleted: create it again
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
        with contextlib.suppress(LittleError):  # else the lease expires on its own
            self.sweeps.release()
        _log("scheduler-stopped", name=self.name)

    def stop(self) -> None:
        """Finish the current turn and leave :meth:`run` (safe from a signal handler)."""
        self._stop.set()

    def close(self) -> None:
        """Wait for archives in progress; close the world and the Redis client if
        whoever made the scheduler handed them over (``owns_clients``)."""
        self.callbacks.close()  # (first: a delivery it stops leaves its run unarchived)
        self.finished.close()
        if self._owns_clients:
            self.world.close()
            self._redis.close()

    # -- one turn ---------------------------------------------------------------------------

    def run_once(self, *, block_ms: int | None = None) -> int:
        """Claim idle entries (when due), read and handle new ones, sweep a few runs.

        Waits up to ``block_ms`` (default: the scheduler's) for a signal when there is
        nothing else to do. Returns the number of signal entries handled.
        """
        now = time.monotonic()
        self.finished.start_due(now)
        self.ticks.turn(now)
        batch: list[Signal] = []
        if now >= self._next_claim:
            batch += self.signals.claim(count=self.read_count)
            self._next_claim = now + self._claim_every
        if self.sweeps.due(now):
            if self.sweeps.claim():
                self.sweeps.begin(now, self._sweep_targets())
                self._cleanup_consumers(now)
            else:
                self.sweeps.begin(now, list(self.runs), full=False)
        wait_ms = self.block_ms if block_ms is None else block_ms
        if batch or self.sweeps.pending:
            wait_ms = 0
        else:
            until = min(
                self.sweeps.seconds_until_due(now),
                self._next_claim - now,
                self.ticks.next_look - now,
            )
            archive_due = self.finished.next_due()
            if archive_due is not None:
                until = min(until, archive_due - now)
            wait_ms = max(1, min(wait_ms, int(until * 1000) + 1))
        if not self._stop.is_set():
            batch += self.signals.read(count=self.read_count, block_ms=wait_ms)
        self.handle(batch)
        for run_id in self._still_to_sweep(self.sweeps.take(self.sweep_batch)):
            if self._stop.is_set():
                break
            self.sweep_run(run_id, fail_dead=self.sweeps.full, leave_moving=True)
        return len(batch)

    def handle(self, batch: Sequence[Signal]) -> None:
        """Look at each run named in ``batch`` once, then acknowledge the entries.

        Entries of a run whose look failed because storage was unreachable stay pending: they
        are claimed again after ``signal_claim_idle``.
        """
        if not batch:
            return
        by_run: dict[str, list[str]] = {}
        newest: dict[str, int] = {}
        for signal in batch:
            by_run.setdefault(signal.run_id, []).append(signal.entry_id)
            newest[signal.run_id] = max(newest.get(signal.run_id, 0), signal.sequence)
        looked: list[str] = []
        notices = ParentNotices()
        for run_id in by_run:
            unread = run_id and run_id not in self.finished
            if unread and not self._look(run_id, newest[run_id], notices):
                continue
            looked.append(run_id)
        # The children that ended in this batch are told to their parents (one append per
        # parent) before their signals are acknowledged; those whose notice could not be
        # written stay pending and unfinished: a later look notices them again.
        failed = set(self._record_notices(notices))
        self.signals.ack(
            [entry for run_id in looked if run_id not in failed for entry in by_run[run_id]]
        )
        # A parent that heard of its children's ends is looked at now, not once its
        # signal (behind every signal that came meanwhile) is read: the last end resumes
        # its step at once. The signal's look finds nothing new.
        for parent in notices.told:
            if parent not in self.finished and not self._stop.is_set():
                self._look(parent)

    def _record_notices(self, notices: ParentNotices) -> list[str]:
        """Record ``notices`` (see :class:`~little_dist.fleet.sub_runs.ParentNotices`), then
        finish the children they tell of; the children whose notice storage refused."""
        if not len(notices):
            return []
        recorded, failed = notices.record(self.world)
        for run_id, status, sequence in recorded:
            self._finish(run_id, status, sequence)
        for run_id in failed:
            self.runs.forget(run_id)
        if failed:
            _log(
                "notice-error",
                level=logging.WARNING,
                runs=failed[:8],
                error=str(notices.error),
            )
        return failed

    def _look(self, run_id: str, signalled: int = 0, notices: ParentNotices | None = None) -> bool:
        """:meth:`advance` that logs instead of raising; False when storage was down."""
        try:
            if not self._finished_unread(run_id, signalled):
                self.advance(run_id, notices=notices)
        except StorageUnavailableError as exc:
            _log("run-error", level=logging.WARNING, exc_info=True, run=run_id, error=str(exc))
            return False
        except Exception as exc:  # one bad run must not stop the others
            self._broken(run_id, exc)
            return True
        self.poison.cleared(run_id)
        return True

    def _broken(self, run_id: str, exc: Exception) -> None:
        """A look at ``run_id`` raised (a bug, or a log the fold cannot read): forget what
        was cached of it; the run is failed after a few such looks in a row (:mod:`.poison`).
        """
        self.runs.forget(run_id)
        if self.poison.broken(run_id, exc):
            self._finish(run_id, "failed", 0)

    # -- a look at one run ------------------------------------------------------------------

    def advance(self, run_id: str, *, notices: ParentNotices | None = None) -> Advance:
        """Fold, decide, append (one batch per round), dispatch; finish the run when over.

        A sub-run that is over tells its parent (``little.subrun.ended``) before it is
        finished: now, or (``notices``) with the other ends of the caller's batch, which
        then records them and finishes the runs (:meth:`handle`)."""
        started = time.perf_counter()
        entry = self.runs.entry(run_id)
        tracker = entry.tracker
        state = tracker.catch_up()
        if tracker.awaiting_plan and past_deadline(self.world, tracker, state):
            state = tracker.catch_up()  # (ended: its deadline passed before it was planned)
        if tracker.awaiting_plan and state.status not in RUN_ENDED:
            return self._await_plan(entry, state)
        if tracker.context is not None and state.status not in RUN_ENDED:
            self._register(entry)  # before anything is appended: the sweeps come back to it
        # The one loop that moves a run on (fold, decide, append, send): the scheduler's
        # look is a look without claims, keeping nothing for itself.
        result = advance_run(
            self.world, self.queue, self.settings, tracker, holder=self.name, read=False
        )
        state, appended, sent = result.state, result.appended, result.sent
        if appended or sent:
            _log(
                "decision",
                run=run_id,
                appended=appended,
                sent=len(sent),
                tasks=[f"{d.step_path}#{d.attempt}" for d in sent[:8]],
                status=state.status,
                seq=state.event_count,
                ms=round((time.perf_counter() - started) * 1000, 3),
            )
        if state.status in RUN_ENDED:
            # Before the run is finished (and its signal acknowledged): a scheduler that
            # dies here leaves the signal to the next one, which notices again.
            if notices is None:
                notice_run_end(self.world, run_id, state)
            else:
                cancel_open_children(self.world, run_id, state)
                if notices.add(run_id, state):
                    return result  # finished once its parent's log holds its end
            self._finish(run_id, state.status, state.event_count)
        return result

    def _register(self, entry: FollowedRun) -> None:
        """Add the run to the active set, once (so the sweeps come back to it)."""
        if not entry.registered:
            self.active.add(entry.tracker.run_id)
            entry.registered = True

    def _await_plan(self, entry: FollowedRun, state: RunState) -> Advance:
        """A run submitted for planning and not started: follow it (the active set, so the
        sweeps come back to it) and send its ``little.plan`` again once
        ``dispatch_resend_after`` has passed since it was last sent (the lease
        :func:`~little_dist.fleet.sending.dispatch_plan` takes): a planner that died, or
        whose planning failed in a way that may pass, is followed by another."""
        run_id = entry.tracker.run_id
        self._register(entry)
        if dispatch_plan(self.world, self.queue, self.settings, run_id, holder=self.name):
            _log("plan-sent", run=run_id, seq=state.event_count)
        return Advance(state, None, (), 0)

    def _finished_unread(
        self, run_id: str, signalled: int | None = None, *, last: int | None = None
    ) -> bool:
        """Finish the run without folding it when its log has more than ``_UNREAD_END_PEEK``
        events this scheduler has not folded and the last one is the run's end (a look
        would only fold them to find the run over); whether it did. ``signalled``: the
        newest sequence the run's signals named (0: unknown), so that a look the signals
        show is not far behind costs no round trip here. ``last``: the log's length, when
        the caller read it."""
        folded = self.runs.folded(run_id)
        if signalled is not None and signalled - folded <= _UNREAD_END_PEEK:
            return False
        if last is None:
            last = self.world.last_sequence(run_id)
        if last - folded <= _UNREAD_END_PEEK:
            return False
        tail = self.world.list_events(run_id, after=last - 1)
        if not tail or tail[-1].type not in _END_STATUS:
            return False
        if tail[-1].type == "RunFailed" or run_id.startswith(SUB_RUN_ID_PREFIX):
            return False  # its end may concern its children or its parent: fold it
        self._finish(run_id, _END_STATUS[tail[-1].type], tail[-1].sequence)
        return True

    def _finish(self, run_id: str, status: str, sequence: int) -> None:
        """Forget the run's cached view and hand it to the archiver (see :mod:`~.archiving`)."""
        callback = self.runs.callback_of(run_id)
        self.runs.forget(run_id)
        self.finished.finish(run_id, status, sequence, callback=callback)

    # -- sweeping ---------------------------------------------------------------------------

    def _sweep_targets(self) -> list[str]:
        targets = self.active.members()
        known = set(targets)
        # Runs this scheduler follows that are not (yet) in the set: look at them too.
        targets += [run_id for run_id in self.runs if run_id not in known]
        return targets

    def sweep_run(
        self, run_id: str, *, fail_dead: bool = True, leave_moving: bool = False
    ) -> list[tuple[str, int]]:
        """Look at the run again and (``fail_dead``) fail its attempts whose worker died;
        which were failed. ``leave_moving``: not if the run's log grew since this
        scheduler's last sweep of it (the loop's sweeps, see
        :meth:`~little_dist.fleet.followed_runs.FollowedRuns.moving`)."""
        if run_id in self.finished:
            return []  # being archived (it leaves the active set when that is done)
        try:
            last = self.world.last_sequence(run_id)
            if self._finished_unread(run_id, last=last):
                return []
            if leave_moving and self.runs.moving(run_id, last):
                return []
            result = self.advance(run_id)
            self.poison.cleared(run_id)
            if result.done or not fail_dead:
                return []
            failed = fail_dead_attempts(
                self.world, self.runs.entry(run_id).tracker, f"{self.name}:sweep"
            )
            if failed:
                _log(
                    "lease-expired",
                    run=run_id,
                    attempts=[f"{path}#{attempt}" for path, attempt in failed],
                )
                self.advance(run_id)
            return failed
        except StorageUnavailableError as exc:
            _log("run-error", level=logging.WARNING, exc_info=True, run=run_id, error=str(exc))
        except Exception as exc:  # one bad run must not stop the sweep
            self._broken(run_id, exc)
        return []

    def _still_to_sweep(self, run_ids: list[str]) -> list[str]:
        """Those of a full round's ``run_ids`` that still need a look: followed here, or
        still in the active set. A round lists the set when it starts and may take minutes
        to get through it under load; a run archived since has left the set, and a look at
        it once Redis let it go would read its whole archive from S3 to find it over."""
        if not self.sweeps.full:
            return run_ids  # (this scheduler's own cache: followed runs)
        unfollowed = [run_id for run_id in run_ids if run_id not in self.runs]
        if not unfollowed:
            return run_ids
        try:
            active = self.active.still_active(unfollowed)
        except StorageUnavailableError as exc:
            _log("sweep-error", level=logging.WARNING, exc_info=exc, error=str(exc))
            return run_ids  # each look reports its own failure
        return [run_id for run_id in run_ids if run_id in self.runs or run_id in active]

    def sweep_all(self) -> dict[str, list[tuple[str, int]]]:
        """One whole sweep now, without the lease (tests, tools): failed attempts per run."""
        return {run_id: self.sweep_run(run_id) for run_id in self._sweep_targets()}

    def _cleanup_consumers(self, now: float) -> None:
        if now < self._next_cleanup:
            return
        self._next_cleanup = now + _CONSUMER_CLEANUP_EVERY
        idle = max(3600.0, self.settings.signal_claim_idle * 10)
        removed = self.signals.forget_idle_consumers(idle)
        if removed:
            _log("consumers-removed", names=removed)
