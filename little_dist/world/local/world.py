"""The :class:`LocalWorld` class: the event database plus the file store under one directory."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from little_dist.errors import RunEndedError, StorageUnavailableError
from little_dist.events import Event, EventInput
from little_dist.ids import RUN_ID_PATTERN, validate_run_id
from little_dist.world.artifacts import now_iso
from little_dist.world.base import (
    ArtifactInput,
    ArtifactManifest,
    ArtifactRead,
    Fence,
    LateEvent,
    Lease,
    LeaseRequest,
)
from little_dist.world.defaults import (
    AppendsInOneProcess,
    DecodesEveryEvent,
    LeasesOneByOne,
    SequentialArtifactsThenAppend,
    WaitForEndByFollowing,
    check_event_window,
    check_lease_request,
    check_submission,
    prepare_events,
    validate_definition_hash,
    validate_version_id,
)
from little_dist.world.local import leases
from little_dist.world.local.database import EventDatabase
from little_dist.world.local.event_log import (
    EVENT_COLUMNS,
    append_prepared,
    check_fence,
    late_events,
    row_to_event,
)
from little_dist.world.local.files import FileStore

__all__ = ["DEFAULT_DATA_DIR", "LocalWorld"]

DEFAULT_DATA_DIR: Final = ".little-workflow"

_T = TypeVar("_T")

_FOLLOW_MIN_SLEEP: Final = 0.02
_FOLLOW_MAX_SLEEP: Final = 0.2
_LIST_EVENTS: Final = (
    f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? AND sequence > ? "
    "ORDER BY sequence LIMIT ?"
)
_LAST_SEQUENCE: Final = "SELECT COALESCE(MAX(sequence), 0) FROM events WHERE run_id = ?"
_FIRST_EVENT: Final = (
    f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? ORDER BY sequence LIMIT 1"
)
_LAST_EVENT: Final = (
    f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? ORDER BY sequence DESC LIMIT 1"
)
_CLAIM: Final = "INSERT OR IGNORE INTO submissions (run_id, input_hash) VALUES (?, ?)"
_CLAIMED: Final = "SELECT input_hash FROM submissions WHERE run_id = ?"


class LocalWorld(
    AppendsInOneProcess,
    LeasesOneByOne,
    SequentialArtifactsThenAppend,
    DecodesEveryEvent,
    WaitForEndByFollowing,
):
    """A :class:`~little_dist.world.base.World` in ``data_dir`` (created if missing).

    ``clock`` gives lease times in epoch seconds (tests inject a fake one);
    ``busy_timeout`` bounds how long a write waits for another process's transaction.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR,
        *,
        clock: Callable[[], float] = time.time,
        busy_timeout: float = 30.0,
    ) -> None:
        self.data_dir = Path(data_dir)
        self._clock = clock
        events_dir = self.data_dir / "events"
        try:
            events_dir.mkdir(parents=True, exist_ok=True)
            self._files = FileStore(self.data_dir)
        except OSError as error:
            raise StorageUnavailableError(
                f"Cannot create the data directory {self.data_dir}: {error}"
            ) from error
        self._db = EventDatabase(
            events_dir / "events.db", busy_timeout=busy_timeout, label=repr(self)
        )

    def __repr__(self) -> str:
        return f"LocalWorld({str(self.data_dir)!r})"

    # -- events -----------------------------------------------------------------------------

    def _append_batch(
        self,
        run_id: str,
        events: Sequence[EventInput],
        *,
        expected_sequence: int | None,
        fence: Fence | None,
    ) -> list[Event]:
        recorded, _ = self._commit(run_id, events, expected_sequence, fence, False, None)
        return recorded

    def append_batch(
        self,
        run_id: str,
        events: Sequence[EventInput],
        *,
        expected_sequence: int | None = None,
        fence: Fence | None = None,
        signal: bool = True,
        release: bool = False,
    ) -> list[Event]:
        del signal  # no scheduler to signal
        recorded, _ = self._commit(run_id, events, expected_sequence, fence, release, None)
        return recorded

    def append_batch_then_acquire(
        self,
        run_id: str,
        events: Sequence[EventInput],
        lease: LeaseRequest,
        *,
        fence: Fence | None = None,
        signal: bool = True,
        release: bool = False,
    ) -> tuple[list[Event], Lease | None]:
        del signal
        check_lease_request(lease.key, lease.holder, lease.ttl_seconds)
        return self._commit(run_id, events, None, fence, release, lease)

    def _commit(
        self,
        run_id: str,
        events: Sequence[EventInput],
        expected_sequence: int | None,
        fence: Fence | None,
        release: bool,
        then_acquire: LeaseRequest | None,
    ) -> tuple[list[Event], Lease | None]:
        """The append, the release of ``fence``'s lease (``release``) and the acquire of
        ``then_acquire`` (if the append is taken) in one transaction: a step's commit is one
        write, not three. A failed append still releases the lease, in a write of its own."""
        freed = (
            Lease(fence.key, fence.holder or "", fence.token, 0.0) if release and fence else None
        )
        written = False
        try:
            validate_run_id(run_id)
            prepared = prepare_events(events)
            if not prepared and freed is None and then_acquire is None:
                return [], None
            recorded_at = now_iso()

            def body(conn: sqlite3.Connection) -> tuple[list[Event] | None, Lease | None]:
                recorded = (
                    append_prepared(
                        conn,
                        run_id,
                        prepared,
                        expected_sequence=expected_sequence,
                        fence=fence,
                        clock=self._clock,
                        recorded_at=recorded_at,
                    )
                    if prepared
                    else []
                )
                if freed is not None:
                    leases.release(conn, freed)
                taken = None
                if recorded is not None and then_acquire is not None:
                    request = then_acquire
                    taken = leases.acquire(
                        conn, request.key, request.holder, request.ttl_seconds, self._clock()
                    )
                return recorded, taken

            recorded, taken = self._db.write(body)
            written = True
        finally:
            if freed is not None and not written:
                self.release_lease(freed)
        if recorded is None:  # (its late record is committed)
            raise RunEndedError(run_id)
        return recorded, taken

    def last_sequence(self, run_id: str) -> int:
        validate_run_id(run_id)
        ((last,),) = self._db.read(_LAST_SEQUENCE, (run_id,))
        return int(last)

    def list_events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[Event]:
        validate_run_id(run_id)
        check_event_window(after, limit)
        rows = self._db.read(_LIST_EVENTS, (run_id, after, -1 if limit is None else limit))
        return [row_to_event(run_id, row) for row in rows]

    def _follow(self, run_id: str, after: int, timeout: float | None) -> Iterator[Event]:
        # Polling: SQLite has no change notification across processes. The sleep grows while
        # the log is quiet and snaps back as soon as something arrives.
        cursor = after
        delay = _FOLLOW_MIN_SLEEP
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            batch = self.list_events(run_id, after=cursor)
            if batch:
                for event in batch:
                    yield event
                    cursor = event.sequence
                delay = _FOLLOW_MIN_SLEEP
                deadline = None if timeout is None else time.monotonic() + timeout
                continue
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                time.sleep(min(delay, remaining))
            else:
                time.sleep(delay)
            delay = min(delay * 2, _FOLLOW_MAX_SLEEP)

    def list_run_ids(self) -> list[str]:
        rows = self._db.read("SELECT DISTINCT run_id FROM events ORDER BY run_id", ())
        return [run_id for (run_id,) in rows if RUN_ID_PATTERN.fullmatch(run_id)]

    def first_and_last_events(self, run_id: str) -> tuple[Event, Event] | None:
        validate_run_id(run_id)
        first = self._db.read(_FIRST_EVENT, (run_id,))
        last = self._db.read(_LAST_EVENT, (run_id,))
        if not first or not last:
            return None
        return row_to_event(run_id, first[0]), row_to_event(run_id, last[0])

    def late_events(self, run_id: str) -> list[LateEvent]:
        validate_run_id(run_id)
        return self._db.with_retry(lambda: late_events(self._db.connection(), run_id))

    # -- submissions --------------------------------------------------------------------------

    def claim_submission(self, run_id: str, input_hash: str) -> str:
        check_submission(run_id, input_hash)

        def claim(conn: Any) -> str:
            conn.execute(_CLAIM, (run_id, input_hash))
            (recorded,) = conn.execute(_CLAIMED, (run_id,)).fetchone()
            return str(recorded)

        # One BEGIN IMMEDIATE transaction: the insert-if-absent and the read of the winner.
        return self._db.write(claim)

    # -- leases -----------------------------------------------------------------------------

    def acquire_lease(self, key: str, holder: str, ttl_seconds: float) -> Lease | None:
        check_lease_request(key, holder, ttl_seconds)
        return self._db.write(
            lambda conn: leases.acquire(conn, key, holder, ttl_seconds, self._clock())
        )

    def renew_lease(self, lease: Lease, ttl_seconds: float) -> Lease:
        check_lease_request(lease.key, lease.holder, ttl_seconds)
        return self._db.write(lambda conn: leases.renew(conn, lease, ttl_seconds, self._clock()))

    def release_lease(self, lease: Lease) -> None:
        self._db.write(lambda conn: leases.release(conn, lease))

    # -- artifacts --------------------------------------------------------------------------

    def put_artifact(self, artifact: ArtifactInput) -> ArtifactManifest:
        return self._files.put_artifact(artifact)

    def get_artifact(self, ref: str, *, run_id: str | None = None) -> ArtifactRead:
        return self._files.get_artifact(ref)

    def _blob_count(self) -> int:
        """Test hook: how many distinct blobs are stored."""
        return self._files.blob_count()

    # -- workflow versions ------------------------------------------------------------------

    def register_version(self, version_id: str, document: dict[str, Any]) -> None:
        self._files.register_version(version_id, document)

    def get_version(self, version_id: str) -> dict[str, Any]:
        return self._files.get_version(version_id)

    def index_version(self, definition_hash: str, version_id: str) -> None:
        validate_definition_hash(definition_hash)
        validate_version_id(version_id)
        self._db.write(
            lambda conn: conn.execute(
                "INSERT OR IGNORE INTO version_index (definition_hash, version_id) VALUES (?, ?)",
                (definition_hash, version_id),
            )
        )

    def indexed_versions(self, definition_hash: str) -> list[str]:
        validate_definition_hash(definition_hash)
        rows = self._db.read(
            "SELECT version_id FROM version_index WHERE definition_hash = ? ORDER BY seq",
            (definition_hash,),
        )
        return [version_id for (version_id,) in rows]

    # -- memory -------------------------------------------------------------------------
    def while_fenced(self, fence: Fence, body: Callable[[], _T]) -> _T:
        """``body()`` while ``fence``'s lease is held: checked in a write transaction held
        until ``body`` returns, so the lease cannot change hands meanwhile; LeaseLostError,
        ``body`` not run, when it is not held."""

        def checked(conn: sqlite3.Connection) -> _T:
            check_fence(conn, fence, self._clock())
            return body()

        return self._db.write(checked)

    def close(self) -> None:
        self._db.close()
