"""A run's event log on a Redis stream: its appends, one Lua script each.

Events of a run are one Redis stream whose entry ids are ``<sequence>-0``, so a stream id is
the event's sequence and ``XLEN`` is the run's last sequence (streams are never trimmed: a
finished run is archived to S3 whole, then its keys expire; see
:mod:`~little_dist.world.redis_s3.archive`). Every append, single or batch, is one Lua
script (:data:`~little_dist.world.redis_s3.scripts.APPEND`) that checks occurrence ids, the
archive marker, the fence and the expected sequence, then appends: atomic, one round trip.

Redis keeps nothing of an archived run once its keys expire, so a run without a stream is
new or archived. The script starts a log only for a caller that knows there is no archive
(a submission under a run id it made up, ``fresh``); else it answers ``absent`` and S3 is
asked: an archived run refuses new events (recorded ones are answered), a new one is
appended to again with the start flag (one S3 read, for a run this process did not make).

Event ids hash the sequence (:func:`little_dist.ids.event_id_for`), which Lua cannot do. The
client guesses the next sequence (cached per run), hashes the ids for that guess and sends
them along; the script assigns the true sequence atomically and keeps a sent id only where
the guess was right. Where it was wrong (another writer got in first) the entry is stored
without an id and the id is derived from the stored fields when read: same value either way,
no retry, no lost atomicity. With one writer per run, the common case, every id is stored.

The append path is the hot one, and on a small machine its client-side CPU, not Redis, sets
the pace; so the payload is canonicalised once (the stored text is also what the id hashes,
via :func:`~little_dist.ids.event_id_for_payload_json`), ``recordedAt`` is printed from a
per-second cache, the script answers a plain integer when every input was appended, and
the key names of a run are computed once per process.

Reads, follows and end waits are :class:`~little_dist.world.redis_s3.event_reads.EventReads`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import redis

from little_dist.errors import InvalidInputError, LeaseLostError, RunEndedError
from little_dist.events import (
    RUN_END_EVENT_TYPES,
    Event,
    EventInput,
    recorded_event,
    wakes_scheduler,
)
from little_dist.ids import event_id_for_payload_json, validate_run_id
from little_dist.observability.hooks import events_appended
from little_dist.world.artifacts import now_iso
from little_dist.world.base import Fence, SequenceConflictError
from little_dist.world.defaults import (
    PreparedEvent,
    late_events_of,
    prepare_events,
    refused_after_end,
)
from little_dist.world.in_flight import InFlightHook, in_flight_hook
from little_dist.world.redis_s3 import scripts
from little_dist.world.redis_s3.archive import RunArchives, RunSealedError
from little_dist.world.redis_s3.entries import (
    decode_entry,
)
from little_dist.world.redis_s3.keys import ENDS_KEPT, ENDS_TTL_MS, KeyLayout
from little_dist.world.redis_s3.late import LateRecords
from little_dist.world.redis_s3.outcomes import RunOutcomes
from little_dist.world.redis_s3.redis_calls import (
    Arg,
    LuaScript,
    execute_pipeline,
    redis_errors,
    text,
    to_storage_error,
)
from little_dist.world.redis_s3.run_listing import RunListing

__all__ = ["EventLog", "ScriptedTask", "recorded_at_now"]

# Runs whose script keys this process keeps (~450 bytes each: at most ~4.5 MB); a run is
# forgotten once this process appends its end or archives it, all when the count is reached.
_RUN_CACHE_SIZE = 10_000
# How long a run's end marker stays (its archive shortens it to the log's TTL).
_ENDED_TTL_MS = 24 * 3600 * 1000


#: ``recordedAt`` of an append (see :data:`~little_dist.world.artifacts.now_iso`).
recorded_at_now = now_iso


class _Run:
    """What this process keeps about a run: its script keys and the last sequence it saw."""

    __slots__ = ("last", "script_keys")

    def __init__(self, layout: KeyLayout, run_id: str) -> None:
        keys = layout.run(run_id)
        self.script_keys = [keys.events, keys.occurrences, keys.archived]
        # Only a guess (see the module docstring), never trusted for order.
        self.last = 0


class ClaimedError(Exception):
    """A submission's claim found another input hash recorded for the run (``recorded``)."""

    def __init__(self, recorded: str) -> None:
        super().__init__(recorded)
        self.recorded = recorded


class ScriptedTask(NamedTuple):
    """One task a start sends from its script (:meth:`EventLog.start_and_send`): its
    dispatch lease (the hash and its counter of old, the field of the run's counters), and
    the LPUSH of ``message`` on ``queue`` then the PUBLISH of ``event`` on ``topic``."""

    lease_key: str
    old_counter: str
    counter_field: str
    queue: str
    message: str
    topic: str
    event: str


class PipelineTail(Protocol):
    """One command queued after an append in the same pipeline (see ``append_batch``)."""

    def queue(self, pipe: Any) -> None: ...

    def done(self, reply: Any) -> None: ...


class EventLog:
    """Appends to every run's stream (its reads: :class:`~.event_reads.EventReads`).

    ``signal_stream``, when set, names a Redis stream that every append writing a new event
    also appends ``run=<run id>, seq=<last sequence>`` to, in the same script, unless the
    append holds only attempt traces (:func:`~little_dist.events.wakes_scheduler`). ``now_ms``
    gives the time the scripts judge leases by: ``""`` for the Redis server's clock.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: KeyLayout,
        archives: RunArchives,
        late: LateRecords,
        listing: RunListing,
        outcomes: RunOutcomes,
        *,
        signal_stream: str | None,
        signal_maxlen: int,
        now_ms: Callable[[], int | str],
    ) -> None:
        self._redis = client
        self._keys = keys
        self._archives = archives
        self._late = late
        self._outcomes = outcomes
        self._signal_stream = signal_stream
        self._now_ms = now_ms
        self._append_script = LuaScript(
            client,
            scripts.append_script(signal_maxlen=signal_maxlen if signal_stream else None),
            # Decided per call: an append is idempotent only when every event carries an
            # occurrence id (a second run answers them); one without would be recorded twice.
            idempotent=False,
        )
        # A submission's start: the claim of its input hash and the append in one step.
        self._claim_script = LuaScript(
            client,
            scripts.append_script(
                signal_maxlen=signal_maxlen if signal_stream else None, claim=True
            ),
            idempotent=False,
        )
        self._end_with_log = LuaScript(client, scripts.END_WITH_LOG, idempotent=True)
        # Sent again after a lost reply, it finds the log and answers 'exists'.
        self._start_and_send = LuaScript(client, scripts.START_AND_SEND, idempotent=True)
        self._runs: dict[str, _Run] = {}
        self._listing = listing

    # -- appends --------------------------------------------------------------------------
    def append_batch(
        self,
        run_id: str,
        events: Sequence[EventInput],
        *,
        expected_sequence: int | None = None,
        fence: Fence | None = None,
        signal: bool = True,
        release: bool = False,
        then: PipelineTail | None = None,
        before: Sequence[PipelineTail] = (),
    ) -> list[Event]:
        """Append ``events`` atomically (see :meth:`World.append_batch`); ``then`` queues
        one more command after the append, in the same round trip, and gets its reply;
        ``before`` queues commands ahead of it (they run first: an artifact the events name).
        """
        hook = in_flight_hook()
        flight = _Flight(hook) if hook is not None else None
        try:
            recorded, new = self._append_batch(
                run_id,
                events,
                expected_sequence=expected_sequence,
                fence=fence,
                signal=signal,
                release=release,
                then=then,
                before=before,
                flight=flight,
            )
        finally:
            if flight is not None and flight.expected is not None:
                flight.hook.settled(flight.confirmed)
        if new:  # (an end two processes appended at once is counted by the one that wrote it)
            events_appended(recorded)
        return recorded

    def claim_and_append(
        self,
        run_id: str,
        input_hash: str,
        events: Sequence[EventInput | PreparedEvent],
        *,
        signal: bool,
        fresh: bool = False,
    ) -> tuple[list[Event], bool]:
        """A submission's start: claim ``input_hash`` for the run (as
        :meth:`~little_dist.world.base.World.claim_submission`) and append ``events`` in one
        step, one round trip; ``(events, new)``, ``new`` when every event was appended (not
        answered from the log). :class:`ClaimedError` when another hash is recorded: nothing
        is appended then. ``fresh``: the caller made the run id up: it has no archive (else
        S3 is asked first: an archived run never starts again)."""
        return self._append_batch(run_id, events, signal=signal, claim=input_hash, fresh=fresh)

    def claim_and_append_many(
        self,
        starts: Sequence[tuple[str, str, Sequence[EventInput | PreparedEvent]]],
        *,
        signal: bool,
        fresh: bool = False,
    ) -> list[str | None]:
        """Several submissions' starts ``(run id, input hash, events)``, each as
        :meth:`claim_and_append`, in one pipeline (one round trip for them all). Per start:
        ``None`` when every event was appended now; else the hash recorded for the run:
        another input's (nothing was appended), or its own (submitted before: the caller
        reads the log). ``fresh`` as :meth:`claim_and_append` (without it, a run Redis has no
        log of is started alone, after S3 was asked)."""
        pipe = self._redis.pipeline(transaction=False)
        recorded_at = recorded_at_now()  # (one append's time for the batch, as one append)
        for run_id, input_hash, events in starts:
            validate_run_id(run_id)
            script, keys, args, _ = self._call(
                run_id,
                _Run(self._keys, run_id),
                prepare_events(events),
                1,
                recorded_at,
                expected_sequence=None,
                fence=None,
                release=False,
                signal=signal,
                claim=input_hash,
                fresh=fresh,
            )
            script.queue(pipe, keys, args)
            pipe.zadd(self._keys.run_index, {run_id: time.time()}, nx=True)
        try:
            # Every start's events carry occurrence ids: sent again, it records nothing twice.
            replies = execute_pipeline(pipe, idempotent=True)
        except redis.exceptions.RedisError as exc:
            raise to_storage_error(exc, "the start of submitted runs") from exc
        answers: list[str | None] = []
        for (run_id, input_hash, events), reply in zip(starts, replies[::2], strict=True):
            if isinstance(reply, int):
                answers.append(None)
            elif reply[0] == b"absent":  # no log in Redis: archived, or new (S3 says which)
                new_run = not self._archives.has_archive(run_id)
                try:
                    _, new = self.claim_and_append(
                        run_id, input_hash, events, signal=signal, fresh=new_run
                    )
                except ClaimedError as claimed:
                    answers.append(claimed.recorded)
                else:
                    answers.append(None if new else input_hash)
            else:
                answers.append(text(reply[1]) if reply[0] == b"mismatch" else input_hash)
        return answers

    def start_and_send(
        self,
        run_id: str,
        input_hash: str,
        events: Sequence[EventInput | PreparedEvent],
        tasks: Sequence[ScriptedTask],
        *,
        holder: str,
        lease_ttl_ms: int,
        counter_ttl_ms: int,
        active_runs: str,
        now_ms: int | str,
        fresh: bool,
    ) -> int | str:
        """A submission's start and its first tasks in one script, one round trip
        (:func:`~little_dist.world.redis_s3.scripts.start_and_send_script`): the claim, the
        run among ``active_runs``, ``events`` onto an empty log, the dispatch leases (for
        ``holder``) and the tasks pushed. The number of tasks pushed; or ``'exists'`` (a
        log was there: nothing appended), ``'archived'`` or ``'absent'`` (no log, and
        ``fresh`` is false: ask S3); :class:`ClaimedError` for another input's hash."""
        validate_run_id(run_id)
        prepared = prepare_events(events)
        keys = self._keys.run(run_id)
        recorded_at = recorded_at_now()
        args: list[Arg] = [
            run_id,
            input_hash,
            "1" if fresh else "",
            recorded_at,
            now_ms,
            repr(time.time()),
            len(prepared),
            holder,
            lease_ttl_ms,
            counter_ttl_ms,
        ]
        for sequence, item in enumerate(prepared, start=1):
            event_id = event_id_for_payload_json(
                run_id, sequence, item.type, item.payload_json, item.occurrence_id
            )
            args += (item.type, item.payload_json, item.occurrence_id or "", event_id)
        script_keys = [
            keys.events,
            keys.occurrences,
            keys.archived,
            keys.submitted,
            self._keys.run_index,
            active_runs,
            keys.tokens,
        ]
        for task in tasks:
            script_keys += (task.lease_key, task.old_counter, task.queue)
            args += (task.counter_field, task.message, task.topic, task.event)
        try:
            result = self._start_and_send(script_keys, args)
        except redis.exceptions.RedisError as exc:
            raise to_storage_error(exc, f"start of {run_id}") from exc
        if isinstance(result, int):
            run = self._runs.get(run_id) or _Run(self._keys, run_id)
            self._remember(run_id, run, len(prepared))
            return result
        if result[0] == b"mismatch":
            raise ClaimedError(text(result[1]))
        return text(result[0])

    # Long on purpose: every append of every step goes through here, and its stages (the run's
    # cache entry, the events, the script's keys and arguments, the answer) share one set of
    # locals: one frame per append on the hot path.
    def _append_batch(
        self,
        run_id: str,
        events: Sequence[EventInput | PreparedEvent],
        *,
        expected_sequence: int | None = None,
        fence: Fence | None = None,
        signal: bool = True,
        release: bool = False,
        then: PipelineTail | None = None,
        before: Sequence[PipelineTail] = (),
        claim: str | None = None,
        fresh: bool = False,
        flight: _Flight | None = None,
    ) -> tuple[list[Event], bool]:
        """:meth:`append_batch`, and whether every event was new; ``claim`` and ``fresh``:
        see :meth:`claim_and_append`; ``flight``: the thread's in-flight hook, handed the
        events the append records as guessed once it is sent (see :class:`_Flight`)."""
        # A run id this process already wrote to was validated then (an unhashable one
        # cannot be a key: it goes to the validation, which refuses it).
        run = self._runs.get(run_id) if type(run_id) is str else None
        first_touch = run is None
        if run is None:
            validate_run_id(run_id)
            run = _Run(self._keys, run_id)
        prepared = prepare_events(events)
        if not prepared and not (release and fence is not None):
            return [], True  # (with a lease to release, the script runs and only releases it)
        if expected_sequence is not None and expected_sequence < 0:
            raise InvalidInputError(f"expected_sequence must be >= 0, got {expected_sequence}")
        guess = (expected_sequence if expected_sequence is not None else run.last) + 1
        recorded_at = recorded_at_now()
        script, script_keys, args, guessed_ids = self._call(
            run_id,
            run,
            prepared,
            guess,
            recorded_at,
            expected_sequence=expected_sequence,
            fence=fence,
            release=release,
            signal=signal,
            claim=claim,
            fresh=fresh,
        )
        ends = any(item.type in RUN_END_EVENT_TYPES for item in prepared)
        # Sent again after a lost reply only if running it twice records nothing twice.
        resend = all(item.occurrence_id is not None for item in prepared)
        meanwhile: Callable[[], None] | None = None
        if flight is not None:

            def meanwhile() -> None:
                flight.expected = [
                    recorded_event(
                        guessed_ids[i],
                        run_id,
                        guess + i,
                        item.type,
                        item.occurrence_id,
                        recorded_at,
                        item.payload,
                    )
                    for i, item in enumerate(prepared)
                ]
                flight.hook.sent(flight.expected)

        try:
            if first_touch or ends or then is not None or before:
                pipe = self._redis.pipeline(transaction=False)
                for head in before:
                    head.queue(pipe)
                script.queue(pipe, script_keys, args)
                if first_touch:
                    # The run index lives outside the run's slot; same round trip.
                    pipe.zadd(self._keys.run_index, {run_id: time.time()}, nx=True)
                if ends:
                    # The run's outcome (a copy of the end its log holds now: this one, or
                    # an earlier one), then marks the end and wakes the run's followers and
                    # waiters now (after the append, in the same round trip): they read the
                    # log in batches instead of on every append.
                    self._outcomes.queue_end(pipe, run_id)
                    pipe.set(self._keys.run(run_id).ended, 1, px=_ENDED_TTL_MS)
                    pipe.xadd(self._keys.ends, {"run": run_id}, maxlen=ENDS_KEPT, approximate=True)
                    pipe.pexpire(self._keys.ends, ENDS_TTL_MS)
                if then is not None:
                    then.queue(pipe)
                replies = execute_pipeline(pipe, idempotent=resend, meanwhile=meanwhile)
                for head, reply in zip(before, replies, strict=False):
                    head.done(reply)
                result = replies[len(before)]
                if then is not None:
                    then.done(replies[-1])
            else:
                result = script(script_keys, args, idempotent=resend, meanwhile=meanwhile)
        except redis.exceptions.RedisError as exc:
            raise to_storage_error(exc, f"append to {run_id}") from exc
        if isinstance(result, int):  # the common case: all appended, input i at result + 1 + i
            first = result + 1
            self._remember(run_id, run, result + len(prepared))
            if ends:
                self._runs.pop(run_id, None)  # (it takes no new events: see _RUN_CACHE_SIZE)
            if flight is not None and flight.expected is not None and first == guess:
                flight.confirmed = True
                return flight.expected, True  # (built while the reply was on its way)
            ids = (
                guessed_ids
                if first == guess
                else [self._id_of(run_id, item, first + i) for i, item in enumerate(prepared)]
            )
            return [
                recorded_event(
                    ids[i],
                    run_id,
                    first + i,
                    item.type,
                    item.occurrence_id,
                    recorded_at,
                    item.payload,
                )
                for i, item in enumerate(prepared)
            ], True
        status = result[0]
        if status == b"mismatch":
            raise ClaimedError(text(result[1]))
        if status == b"conflict":
            actual = int(result[1])
            self._remember(run_id, run, actual)
            assert expected_sequence is not None
            raise SequenceConflictError(run_id, expected_sequence, actual)
        if status == b"fenced":
            assert fence is not None
            raise LeaseLostError(f"Lease {fence.key!r} is no longer held with token {fence.token}")
        if status == b"ended":
            refused = [prepared[int(index) - 1] for index in result[1]]
            self._late.keep(run_id, late_events_of(run_id, refused, recorded_at))
            raise RunEndedError(run_id)
        if status in (b"archived", b"absent"):
            if status == b"archived" or self._archives.has_archive(run_id):
                if first_touch:  # (the pipeline indexed the run: it must not stay there)
                    self._listing.forget(run_id)
                if ends:  # (and marked it ended for a day: it goes with the log instead)
                    with redis_errors(f"append to {run_id}"):
                        keys = self._keys.run(run_id)
                        self._end_with_log([keys.ended, keys.events], [])
                return self._recorded_in_archive(run_id, prepared, recorded_at), False
            # No archive either: a new run (nothing was written), started now.
            return self._append_batch(
                run_id,
                events,
                expected_sequence=expected_sequence,
                fence=fence,
                signal=signal,
                release=release,
                then=then,
                before=before,
                claim=claim,
                fresh=True,
            )
        recorded = self._decode_append(
            run_id, run, prepared, guess, guessed_ids, recorded_at, result
        )
        if ends:
            self._runs.pop(run_id, None)
        return recorded, all(kind == b"n" for kind, _, _ in result[2])

    def _call(
        self,
        run_id: str,
        run: _Run,
        prepared: Sequence[PreparedEvent],
        guess: int,
        recorded_at: str,
        *,
        expected_sequence: int | None,
        fence: Fence | None,
        release: bool,
        signal: bool,
        claim: str | None,
        fresh: bool,
    ) -> tuple[LuaScript, list[str], list[Arg], list[str]]:
        """The append script to run for an append, its keys and arguments, and the event
        ids guessed (hashed for the sequences from ``guess`` on)."""
        args: list[Arg] = [
            "" if expected_sequence is None else expected_sequence,
            "" if fence is None else self._fence_arg(fence, release),
            guess,
            recorded_at,
        ]
        if self._signal_stream:
            # Attempt traces (write-ahead points, call results) cannot make a step ready:
            # only appends that can wake the scheduler (see wakes_scheduler).
            wakes = signal and wakes_scheduler(item.type for item in prepared)
            args.append(run_id if wakes else "")
        if claim is not None:
            args.append(claim)
        args.append("1" if fresh else "")
        guessed_ids: list[str] = []
        for index, item in enumerate(prepared):
            event_id = event_id_for_payload_json(
                run_id, guess + index, item.type, item.payload_json, item.occurrence_id
            )
            guessed_ids.append(event_id)
            args += (item.type, item.payload_json, item.occurrence_id or "", event_id)
        script_keys = list(run.script_keys)
        script = self._append_script
        if fence is not None or self._signal_stream or claim is not None:
            if claim is not None:  # (a submission's start is never fenced)
                assert fence is None
                script = self._claim_script
                script_keys.append(self._keys.run(run_id).submitted)
            if fence is not None:
                script_keys.append(self._keys.lease(fence.key)[0])
            if self._signal_stream:
                script_keys.append(self._signal_stream)
        return script, script_keys, args, guessed_ids

    def _fence_arg(self, fence: Fence, release: bool) -> str:
        now = self._now_ms()
        arg = f"{fence.token}" if now == "" else f"{fence.token}@{now}"
        if release:
            arg += "!"
        return arg if fence.holder is None else f"{arg}|{fence.holder}"

    @staticmethod
    def _id_of(run_id: str, item: PreparedEvent, sequence: int) -> str:
        return event_id_for_payload_json(
            run_id, sequence, item.type, item.payload_json, item.occurrence_id
        )

    def _decode_append(
        self,
        run_id: str,
        run: _Run,
        prepared: list[PreparedEvent],
        guess: int,
        guessed_ids: list[str],
        recorded_at: str,
        result: list[Any],
    ) -> list[Event]:
        out: list[Event] = []
        last = int(result[1])
        for index, (kind, number, fields) in enumerate(result[2]):
            sequence = int(number)
            if kind == b"n":
                item = prepared[index]
                out.append(
                    recorded_event(
                        (
                            guessed_ids[index]
                            if sequence == guess + index
                            else self._id_of(run_id, item, sequence)
                        ),
                        run_id,
                        sequence,
                        item.type,
                        item.occurrence_id,
                        recorded_at,
                        item.payload,
                    )
                )
                last = max(last, sequence)
            elif kind == b"e":
                out.append(decode_entry(run_id, sequence, fields))
            else:  # b"d": the same occurrence id as an earlier input of this batch
                out.append(out[sequence - 1])
        self._remember(run_id, run, last)
        return out

    def forget(self, run_id: str) -> None:
        """Drop what this process keeps of the run (archived: it takes no new events)."""
        self._runs.pop(run_id, None)

    def saw(self, run_id: str, last: int) -> None:
        """A reader saw the run's log up to ``last``: the next append guesses past it (a
        wrong guess hashes every id twice; see the module docstring). Only for a run this
        process appends to."""
        run = self._runs.get(run_id)
        if run is not None and last > run.last:
            run.last = last

    def _remember(self, run_id: str, run: _Run, last: int) -> None:
        run.last = last
        if run_id not in self._runs:
            if len(self._runs) >= _RUN_CACHE_SIZE:
                self._runs.clear()
            self._runs[run_id] = run

    def _recorded_in_archive(
        self, run_id: str, prepared: list[PreparedEvent], recorded_at: str
    ) -> list[Event]:
        """An append to a sealed run succeeds only if every input is already recorded; the
        refused ones' model usage is kept in the run's late record (a sealed run has
        ended)."""
        archived = self._archives.events(run_id, required=False) or []
        by_occurrence: dict[str | None, Event] = {
            e.occurrence_id: e for e in archived if e.occurrence_id is not None
        }
        found = [by_occurrence.get(item.occurrence_id) for item in prepared]
        if all(event is not None for event in found):
            return [event for event in found if event is not None]
        refused = [item for item, event in zip(prepared, found, strict=True) if event is None]
        if archived and refused_after_end(refused):
            self._late.keep(run_id, late_events_of(run_id, refused, recorded_at))
        raise RunSealedError(run_id)


class _Flight:
    """One append's use of the thread's in-flight hook (:mod:`little_dist.world.in_flight`):
    the events it expects (set once the append is sent, when ``hook.sent`` is called) and
    whether the reply recorded exactly those (``hook.settled`` is called with it)."""

    __slots__ = ("confirmed", "expected", "hook")

    def __init__(self, hook: InFlightHook) -> None:
        self.hook = hook
        self.expected: list[Event] | None = None
        self.confirmed = False
