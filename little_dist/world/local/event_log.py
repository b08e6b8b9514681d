"""The event log of :class:`~little_dist.world.local.LocalWorld`: SQL bodies over one connection.

An append is one transaction (run by the caller in ``BEGIN IMMEDIATE``): check the run's end
(a run that has ended takes no new event of its own: the refused events' model usage goes to
``late_events`` instead, in the same transaction), the fence and the expected sequence,
insert the new rows with one ``executemany``. The batch's occurrence ids are looked up (one
query) only when the insert finds one recorded, or a check fails: a repeat of recorded
events is answered with them, whatever the checks say. Each payload is encoded once, before
the transaction (:func:`~little_dist.world.defaults.prepare_events`); the event id is hashed
from that same canonical text (:meth:`~little_dist.world.defaults.PreparedEvent.to_event`)
instead of encoding the payload a second time.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any, Final

from little_dist.canonical import canonical_json
from little_dist.errors import LeaseLostError
from little_dist.events import Event, recorded_event
from little_dist.occurrences import RUN_END
from little_dist.world.base import Fence, LateEvent, SequenceConflictError
from little_dist.world.defaults import PreparedEvent, late_events_of, refused_after_end

__all__ = [
    "EVENT_COLUMNS",
    "append_prepared",
    "check_fence",
    "late_events",
    "row_to_event",
]

EVENT_COLUMNS: Final = "sequence, event_id, type, occurrence_id, recorded_at, payload"
_INSERT: Final = (
    "INSERT INTO events (run_id, sequence, event_id, type, occurrence_id, recorded_at, payload)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_UNDO: Final = "DELETE FROM events WHERE run_id = ? AND sequence > ?"
_FENCE: Final = "SELECT holder, token, expires_at FROM leases WHERE key = ?"
# What an append checks, in one statement: whether the engine's end (occurrence run-end,
# found by the index) is recorded, and the last event's sequence and type (an end, whoever
# wrote it, also ends the run: once ends seal the log, an end is always the last event).
_LOG_END: Final = (
    "SELECT EXISTS (SELECT 1 FROM events WHERE run_id = ?1 AND occurrence_id = ?2), "
    "(SELECT sequence FROM events WHERE run_id = ?1 ORDER BY sequence DESC LIMIT 1), "
    "(SELECT type FROM events WHERE run_id = ?1 ORDER BY sequence DESC LIMIT 1)"
)
_END_TYPES: Final = frozenset(("RunCompleted", "RunFailed"))
_KEEP_LATE: Final = (
    "INSERT OR IGNORE INTO late_events (run_id, type, occurrence_id, recorded_at, payload) "
    "VALUES (?, ?, ?, ?, ?)"
)
_LATE: Final = (
    "SELECT type, occurrence_id, recorded_at, payload FROM late_events WHERE run_id = ? "
    "ORDER BY seq"
)
# SQLite's historical bound on host parameters is 999; one is the run id.
_LOOKUP_CHUNK: Final = 500


def row_to_event(run_id: str, row: tuple[Any, ...]) -> Event:
    """The :class:`Event` of one ``EVENT_COLUMNS`` row."""
    sequence, event_id, event_type, occurrence_id, recorded_at, payload = row
    # (this world's own rows, written checked: no second validation)
    return recorded_event(
        event_id, run_id, sequence, event_type, occurrence_id, recorded_at, json.loads(payload)
    )


def check_fence(conn: sqlite3.Connection, fence: Fence, now: float) -> None:
    """Raise :class:`LeaseLostError` unless ``fence``'s lease is held, live, with its token
    (and by its holder, when the fence names one)."""
    if not _fence_holds(conn, fence, now):
        raise LeaseLostError(f"Lease {fence.key!r} is no longer held with token {fence.token}")


def _fence_holds(conn: sqlite3.Connection, fence: Fence, now: float) -> bool:
    row = conn.execute(_FENCE, (fence.key,)).fetchone()
    return not (
        row is None
        or row[0] is None
        or row[1] != fence.token
        or (fence.holder is not None and row[0] != fence.holder)
        or row[2] <= now
    )


def _recorded(conn: sqlite3.Connection, run_id: str, occurrence_ids: list[str]) -> dict[str, Event]:
    """The already recorded events among ``occurrence_ids``, by occurrence id."""
    found: dict[str, Event] = {}
    for start in range(0, len(occurrence_ids), _LOOKUP_CHUNK):
        chunk = occurrence_ids[start : start + _LOOKUP_CHUNK]
        marks = ",".join("?" * len(chunk))
        rows = conn.execute(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? AND occurrence_id IN ({marks})",
            (run_id, *chunk),
        ).fetchall()
        for row in rows:
            found[row[3]] = row_to_event(run_id, row)
    return found


def append_prepared(
    conn: sqlite3.Connection,
    run_id: str,
    prepared: Sequence[PreparedEvent],
    *,
    expected_sequence: int | None,
    fence: Fence | None,
    clock: Any,
    recorded_at: str,
) -> list[Event] | None:
    """The body of an append, inside the caller's write transaction (see the module doc).

    Events whose occurrence id is recorded are returned as recorded (a repeated id inside
    the batch names the first of them); when every event is such a repeat nothing is
    checked or written. ``None``: refused, the run has ended (the late record is written:
    commit, then raise).
    """
    occurrence_ids = [item.occurrence_id for item in prepared if item.occurrence_id is not None]
    if len(set(occurrence_ids)) == len(occurrence_ids):
        appended = _append_new(
            conn, run_id, prepared, expected_sequence, fence, clock(), recorded_at
        )
        if appended is not None:
            return appended
    recorded = _recorded(conn, run_id, occurrence_ids) if occurrence_ids else {}
    if len(occurrence_ids) == len(prepared) and all(oid in recorded for oid in occurrence_ids):
        return [recorded[oid] for oid in occurrence_ids]
    new = [item for item in prepared if item.occurrence_id not in recorded]
    end_recorded, last, last_type = conn.execute(_LOG_END, (run_id, RUN_END)).fetchone()
    ended = end_recorded or last_type in _END_TYPES
    if ended and refused_after_end(new):
        conn.executemany(
            _KEEP_LATE,
            [
                (
                    run_id,
                    late.type,
                    late.occurrence_id,
                    late.recorded_at,
                    canonical_json(late.payload),
                )
                for late in late_events_of(run_id, new, recorded_at)
            ],
        )
        return None
    if fence is not None:
        check_fence(conn, fence, clock())
    last = last or 0
    if expected_sequence is not None and expected_sequence != last:
        raise SequenceConflictError(run_id, expected_sequence, last)
    result: list[Event] = []
    rows: list[tuple[Any, ...]] = []
    for item in prepared:
        oid = item.occurrence_id
        if oid is not None:
            existing = recorded.get(oid)
            if existing is not None:
                result.append(existing)
                continue
        last += 1
        event = item.to_event(run_id, last, recorded_at)
        rows.append((run_id, last, event.event_id, item.type, oid, recorded_at, item.payload_json))
        if oid is not None:
            recorded[oid] = event  # a repeat later in this batch names this one
        result.append(event)
    conn.executemany(_INSERT, rows)
    return result


def _append_new(
    conn: sqlite3.Connection,
    run_id: str,
    prepared: Sequence[PreparedEvent],
    expected_sequence: int | None,
    fence: Fence | None,
    now: float,
    recorded_at: str,
) -> list[Event] | None:
    """The append of a batch none of whose occurrence ids is recorded yet (what almost every
    append is), without looking them up first: the unique index refuses a recorded one, and
    the rows inserted before it are deleted. ``None`` when the batch is not plainly new
    (the run has ended, the fence or the expected sequence fails, an id is recorded): the
    general path then decides, because a repeat of recorded events is answered with them
    even then."""
    end_recorded, last, last_type = conn.execute(_LOG_END, (run_id, RUN_END)).fetchone()
    if end_recorded or last_type in _END_TYPES:
        return None
    if fence is not None and not _fence_holds(conn, fence, now):
        return None
    first = last = last or 0
    if expected_sequence is not None and expected_sequence != last:
        return None
    result: list[Event] = []
    rows: list[tuple[Any, ...]] = []
    for item in prepared:
        last += 1
        event = item.to_event(run_id, last, recorded_at)
        rows.append(
            (
                run_id,
                last,
                event.event_id,
                item.type,
                item.occurrence_id,
                recorded_at,
                item.payload_json,
            )
        )
        result.append(event)
    try:
        conn.executemany(_INSERT, rows)
    except sqlite3.IntegrityError:
        conn.execute(_UNDO, (run_id, first))
        return None
    return result


def late_events(conn: sqlite3.Connection, run_id: str) -> list[LateEvent]:
    """The run's late record, oldest first."""
    return [
        LateEvent(run_id, event_type, json.loads(payload), recorded_at, occurrence_id)
        for event_type, occurrence_id, recorded_at, payload in conn.execute(_LATE, (run_id,))
    ]
