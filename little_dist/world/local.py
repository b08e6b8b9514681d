"""``LocalWorld``: SQLite (WAL) plus files under one data directory; the embedded default.

Layout of ``<data_dir>`` (upstream's, except that blobs are named by their content hash, so
the same bytes are stored once)::

    events/events.db            events (run_id, sequence), leases and the version index,
                                SQLite in WAL mode
    artifacts/<artifactId>.json manifest, canonical JSON
    artifacts/blobs/<sha256>    payload bytes
    versions/<versionId>.json   immutable workflow versions, canonical JSON

Several processes on one machine may share a data directory: every append runs in a
``BEGIN IMMEDIATE`` transaction (read the last sequence, check occurrence ids, the fence and
the expected sequence, insert), and leases live in the same database, so a fenced append is
atomic with its lease check. Files are written to a temporary name, synced, and linked into
place (put-if-absent: the first writer wins, later writers read what it wrote).

``sqlite3`` and OS errors surface as :class:`~little_dist.errors.StorageUnavailableError`,
raised from the original.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from little_dist.canonical import canonical_json
from little_dist.errors import (
    ConflictError,
    InvalidInputError,
    LeaseLostError,
    StorageUnavailableError,
)
from little_dist.events import Event, EventInput
from little_dist.ids import RUN_ID_PATTERN, artifact_id_from_ref, validate_run_id
from little_dist.world.artifacts import (
    build_manifest,
    decode_artifact_payload,
    encode_artifact_payload,
    now_iso,
    payload_sha256,
)
from little_dist.world.base import (
    ArtifactCorruptError,
    ArtifactInput,
    ArtifactManifest,
    ArtifactNotFoundError,
    ArtifactRead,
    Fence,
    Lease,
    PreparedEvent,
    SequenceConflictError,
    VersionNotFoundError,
    check_event_window,
    check_lease_request,
    prepare_events,
    validate_definition_hash,
    validate_version_id,
)

__all__ = ["DEFAULT_DATA_DIR", "LocalWorld"]

DEFAULT_DATA_DIR = ".little-workflow"

_T = TypeVar("_T")

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS events (
        run_id TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        event_id TEXT NOT NULL,
        type TEXT NOT NULL,
        occurrence_id TEXT,
        recorded_at TEXT NOT NULL,
        payload TEXT NOT NULL,
        PRIMARY KEY (run_id, sequence)
    )""",
    """CREATE UNIQUE INDEX IF NOT EXISTS events_occurrence
        ON events (run_id, occurrence_id) WHERE occurrence_id IS NOT NULL""",
    # definition hash -> version ids; seq (the rowid) keeps the order they were first indexed.
    """CREATE TABLE IF NOT EXISTS version_index (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        definition_hash TEXT NOT NULL,
        version_id TEXT NOT NULL,
        UNIQUE (definition_hash, version_id)
    )""",
    # holder is NULL once released; the row stays so the token only grows.
    """CREATE TABLE IF NOT EXISTS leases (
        key TEXT PRIMARY KEY,
        holder TEXT,
        token INTEGER NOT NULL,
        expires_at REAL NOT NULL
    )""",
)
_EVENT_COLUMNS = "sequence, event_id, type, occurrence_id, recorded_at, payload"
_FOLLOW_MIN_SLEEP = 0.02
_FOLLOW_MAX_SLEEP = 0.2


class LocalWorld:
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
        self._busy_timeout = busy_timeout
        self._events_dir = self.data_dir / "events"
        self._artifacts_dir = self.data_dir / "artifacts"
        self._blobs_dir = self._artifacts_dir / "blobs"
        self._versions_dir = self.data_dir / "versions"
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._pid = os.getpid()
        self._closed = False
        try:
            for directory in (self._events_dir, self._blobs_dir, self._versions_dir):
                directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StorageUnavailableError(
                f"Cannot create the data directory {self.data_dir}: {error}"
            ) from error
        self._with_retry(self._create_schema)

    def __repr__(self) -> str:
        return f"LocalWorld({str(self.data_dir)!r})"

    # -- connections and transactions ------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._closed:
            raise StorageUnavailableError(f"{self!r} is closed")
        if self._pid != os.getpid():  # forked: the parent's connections are not ours
            self._local = threading.local()
            self._connections = []
            self._pid = os.getpid()
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self._events_dir / "events.db",
                timeout=self._busy_timeout,
                isolation_level=None,  # we issue BEGIN IMMEDIATE / COMMIT ourselves
                check_same_thread=False,  # so close() may close every thread's connection
            )
            conn.execute("PRAGMA synchronous = NORMAL")
            self._local.conn = conn
            with self._connections_lock:
                self._connections.append(conn)
        return conn

    def _create_schema(self) -> None:
        conn = self._connection()
        conn.execute("PRAGMA journal_mode = WAL")
        for statement in _SCHEMA:
            conn.execute(statement)

    def _with_retry(self, body: Callable[[], _T]) -> _T:
        """Run ``body``, retrying while another process holds the database lock."""
        deadline = time.monotonic() + self._busy_timeout
        delay = 0.005
        while True:
            try:
                return body()
            except sqlite3.OperationalError as error:
                if _is_busy(error) and time.monotonic() < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 0.1)
                    continue
                raise StorageUnavailableError(f"Event store unavailable: {error}") from error
            except sqlite3.Error as error:
                raise StorageUnavailableError(f"Event store unavailable: {error}") from error

    def _write(self, body: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``body`` in one ``BEGIN IMMEDIATE`` transaction: all of it or none."""

        def attempt() -> _T:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = body(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return result

        return self._with_retry(attempt)

    def _read(self, sql: str, params: Sequence[Any]) -> list[Any]:
        return self._with_retry(lambda: self._connection().execute(sql, params).fetchall())

    # -- events -----------------------------------------------------------------------------

    def append(
        self,
        run_id: str,
        event: EventInput,
        *,
        expected_sequence: int | None = None,
        fence: Fence | None = None,
    ) -> Event:
        (recorded,) = self.append_batch(
            run_id, [event], expected_sequence=expected_sequence, fence=fence
        )
        return recorded

    def append_batch(
        self,
        run_id: str,
        events: Sequence[EventInput],
        *,
        expected_sequence: int | None = None,
        fence: Fence | None = None,
    ) -> list[Event]:
        validate_run_id(run_id)
        prepared = prepare_events(events)
        if not prepared:
            return []
        recorded_at = now_iso()

        def body(conn: sqlite3.Connection) -> list[Event]:
            resolved = [
                None
                if item.occurrence_id is None
                else self._by_occurrence(conn, run_id, item.occurrence_id)
                for item in prepared
            ]
            if all(event is not None for event in resolved):
                return [event for event in resolved if event is not None]
            if fence is not None:
                _check_fence(conn, fence, self._clock())
            (last,) = conn.execute(
                "SELECT COALESCE(MAX(sequence), 0) FROM events WHERE run_id = ?", (run_id,)
            ).fetchone()
            if expected_sequence is not None and expected_sequence != last:
                raise SequenceConflictError(run_id, expected_sequence, last)
            return _insert(conn, run_id, last, prepared, resolved, recorded_at)

        return self._write(body)

    @staticmethod
    def _by_occurrence(conn: sqlite3.Connection, run_id: str, occurrence_id: str) -> Event | None:
        row = conn.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE run_id = ? AND occurrence_id = ?",
            (run_id, occurrence_id),
        ).fetchone()
        return None if row is None else _row_to_event(run_id, row)

    def last_sequence(self, run_id: str) -> int:
        validate_run_id(run_id)
        ((last,),) = self._read(
            "SELECT COALESCE(MAX(sequence), 0) FROM events WHERE run_id = ?", (run_id,)
        )
        return int(last)

    def list_events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[Event]:
        validate_run_id(run_id)
        check_event_window(after, limit)
        rows = self._read(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE run_id = ? AND sequence > ? "
            "ORDER BY sequence LIMIT ?",
            (run_id, after, -1 if limit is None else limit),
        )
        return [_row_to_event(run_id, row) for row in rows]

    def follow(
        self, run_id: str, *, after: int = 0, timeout: float | None = None
    ) -> Iterator[Event]:
        validate_run_id(run_id)
        check_event_window(after, None)
        return self._follow(run_id, after, timeout)

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
        rows = self._read("SELECT DISTINCT run_id FROM events ORDER BY run_id", ())
        return [run_id for (run_id,) in rows if RUN_ID_PATTERN.match(run_id)]

    # -- leases -----------------------------------------------------------------------------

    def acquire_lease(self, key: str, holder: str, ttl_seconds: float) -> Lease | None:
        check_lease_request(key, holder, ttl_seconds)

        def body(conn: sqlite3.Connection) -> Lease | None:
            now = self._clock()
            row = conn.execute(
                "SELECT holder, token, expires_at FROM leases WHERE key = ?", (key,)
            ).fetchone()
            expires_at = now + ttl_seconds
            if row is None:
                conn.execute(
                    "INSERT INTO leases (key, holder, token, expires_at) VALUES (?, ?, 1, ?)",
                    (key, holder, expires_at),
                )
                return Lease(key, holder, 1, expires_at)
            current, token, current_expiry = row
            live = current is not None and current_expiry > now
            if live and current != holder:
                return None
            if not live:
                token += 1  # a new tenure: older holders' fences go stale
            conn.execute(
                "UPDATE leases SET holder = ?, token = ?, expires_at = ? WHERE key = ?",
                (holder, token, expires_at, key),
            )
            return Lease(key, holder, int(token), expires_at)

        return self._write(body)

    def renew_lease(self, lease: Lease, ttl_seconds: float) -> Lease:
        check_lease_request(lease.key, lease.holder, ttl_seconds)

        def body(conn: sqlite3.Connection) -> Lease:
            now = self._clock()
            _check_fence(conn, lease.fence, now)
            expires_at = now + ttl_seconds
            conn.execute("UPDATE leases SET expires_at = ? WHERE key = ?", (expires_at, lease.key))
            return Lease(lease.key, lease.holder, lease.token, expires_at)

        return self._write(body)

    def release_lease(self, lease: Lease) -> None:
        def body(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE leases SET holder = NULL, expires_at = 0 "
                "WHERE key = ? AND token = ? AND holder IS NOT NULL",
                (lease.key, lease.token),
            )

        self._write(body)

    # -- artifacts --------------------------------------------------------------------------

    def put_artifact(self, artifact: ArtifactInput) -> ArtifactManifest:
        validate_run_id(artifact.run_id)
        data, encoding = encode_artifact_payload(artifact.payload)
        manifest = build_manifest(artifact, data, encoding, now_iso())
        manifest_path = self._artifacts_dir / f"{manifest.artifact_id}.json"
        try:
            existing = self._read_manifest_if_present(manifest_path, manifest.artifact_ref)
            if existing is not None:
                return self._check_same(existing, manifest)
            blob_path = self._blobs_dir / manifest.sha256[len("sha256:") :]
            if not blob_path.exists():
                _publish(blob_path, data)
            text = canonical_json(manifest.to_json()) + "\n"
            if _publish(manifest_path, text.encode("utf-8")):
                return manifest
        except OSError as error:
            raise StorageUnavailableError(
                f"Cannot write artifact {manifest.artifact_ref}: {error}"
            ) from error
        # Another writer published the same artifact first: its manifest is the artifact.
        winner = self._read_manifest_if_present(manifest_path, manifest.artifact_ref)
        if winner is None:
            raise StorageUnavailableError(f"Artifact manifest vanished: {manifest.artifact_ref}")
        return self._check_same(winner, manifest)

    @staticmethod
    def _check_same(existing: ArtifactManifest, wanted: ArtifactManifest) -> ArtifactManifest:
        if existing.sha256 != wanted.sha256 or existing.size_bytes != wanted.size_bytes:
            raise ArtifactCorruptError(
                wanted.artifact_ref, "an existing manifest with this id names other bytes"
            )
        return existing

    def get_artifact(self, ref: str) -> ArtifactRead:
        artifact_id = artifact_id_from_ref(ref)
        manifest = self._read_manifest_if_present(self._artifacts_dir / f"{artifact_id}.json", ref)
        if manifest is None:
            raise ArtifactNotFoundError(ref)
        if manifest.artifact_id != artifact_id or manifest.artifact_ref != ref:
            raise ArtifactCorruptError(ref, "the manifest names another artifact")
        try:
            data = (self._blobs_dir / manifest.sha256[len("sha256:") :]).read_bytes()
        except FileNotFoundError as error:
            raise ArtifactNotFoundError(ref) from error
        except OSError as error:
            raise StorageUnavailableError(f"Cannot read artifact {ref}: {error}") from error
        if payload_sha256(data) != manifest.sha256:
            raise ArtifactCorruptError(ref, "stored bytes do not match the manifest's sha256")
        if len(data) != manifest.size_bytes:
            raise ArtifactCorruptError(ref, "sizeBytes does not match the stored bytes")
        return ArtifactRead(manifest, decode_artifact_payload(data, manifest.encoding))

    @staticmethod
    def _read_manifest_if_present(path: Path, ref: str) -> ArtifactManifest | None:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as error:
            raise StorageUnavailableError(
                f"Cannot read artifact manifest {ref}: {error}"
            ) from error
        try:
            data = json.loads(text)
            manifest = ArtifactManifest.from_json(data)
        except (ValueError, KeyError, TypeError) as error:
            raise ArtifactCorruptError(ref, f"malformed manifest: {error}") from error
        if manifest.encoding not in ("json", "utf-8", "binary"):
            raise ArtifactCorruptError(ref, f"unknown encoding {manifest.encoding!r}")
        return manifest

    def _blob_count(self) -> int:
        """Test hook: how many distinct blobs are stored."""
        return sum(1 for path in self._blobs_dir.iterdir() if not path.name.endswith(".tmp"))

    # -- workflow versions ------------------------------------------------------------------

    def register_version(self, version_id: str, document: dict[str, Any]) -> None:
        validate_version_id(version_id)
        if not isinstance(document, dict):
            raise InvalidInputError(f"A workflow version document must be an object: {version_id}")
        text = canonical_json(document) + "\n"
        path = self._versions_dir / f"{version_id}.json"
        try:
            if _publish(path, text.encode("utf-8")):
                return
            existing = path.read_text(encoding="utf-8")
        except OSError as error:
            raise StorageUnavailableError(f"Cannot write version {version_id}: {error}") from error
        if existing != text:
            raise ConflictError(
                f"Workflow version {version_id} is already registered with a different document"
            )

    def get_version(self, version_id: str) -> dict[str, Any]:
        validate_version_id(version_id)
        try:
            text = (self._versions_dir / f"{version_id}.json").read_text(encoding="utf-8")
        except FileNotFoundError as error:
            raise VersionNotFoundError(version_id) from error
        except OSError as error:
            raise StorageUnavailableError(f"Cannot read version {version_id}: {error}") from error
        document: dict[str, Any] = json.loads(text)
        return document

    def index_version(self, definition_hash: str, version_id: str) -> None:
        validate_definition_hash(definition_hash)
        validate_version_id(version_id)

        def body(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR IGNORE INTO version_index (definition_hash, version_id) VALUES (?, ?)",
                (definition_hash, version_id),
            )

        self._write(body)

    def indexed_versions(self, definition_hash: str) -> list[str]:
        validate_definition_hash(definition_hash)
        rows = self._read(
            "SELECT version_id FROM version_index WHERE definition_hash = ? ORDER BY seq",
            (definition_hash,),
        )
        return [version_id for (version_id,) in rows]

    def close(self) -> None:
        self._closed = True
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()


# -- helpers --------------------------------------------------------------------------------


def _is_busy(error: sqlite3.OperationalError) -> bool:
    text = str(error).lower()
    return "locked" in text or "busy" in text


def _row_to_event(run_id: str, row: tuple[Any, ...]) -> Event:
    sequence, event_id, event_type, occurrence_id, recorded_at, payload = row
    return Event(
        event_id=event_id,
        run_id=run_id,
        sequence=sequence,
        type=event_type,
        occurrence_id=occurrence_id,
        recorded_at=recorded_at,
        payload=json.loads(payload),
    )


def _check_fence(conn: sqlite3.Connection, fence: Fence, now: float) -> None:
    row = conn.execute(
        "SELECT holder, token, expires_at FROM leases WHERE key = ?", (fence.key,)
    ).fetchone()
    if row is None or row[0] is None or row[1] != fence.token or row[2] <= now:
        raise LeaseLostError(f"Lease {fence.key!r} is no longer held with token {fence.token}")


def _insert(
    conn: sqlite3.Connection,
    run_id: str,
    last: int,
    prepared: list[PreparedEvent],
    resolved: list[Event | None],
    recorded_at: str,
) -> list[Event]:
    result: list[Event] = []
    new_by_occurrence: dict[str, Event] = {}
    rows: list[tuple[Any, ...]] = []
    for item, existing in zip(prepared, resolved, strict=True):
        # A repeated occurrence id inside one batch names the event of the first of them.
        if existing is None and item.occurrence_id is not None:
            existing = new_by_occurrence.get(item.occurrence_id)
        if existing is not None:
            result.append(existing)
            continue
        last += 1
        event = item.to_event(run_id, last, recorded_at)
        rows.append(
            (
                run_id,
                last,
                event.event_id,
                event.type,
                item.occurrence_id,
                recorded_at,
                item.payload_json,
            )
        )
        if item.occurrence_id is not None:
            new_by_occurrence[item.occurrence_id] = event
        result.append(event)
    conn.executemany(
        "INSERT INTO events (run_id, sequence, event_id, type, occurrence_id, recorded_at, payload)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    return result


def _publish(path: Path, data: bytes) -> bool:
    """Write ``data`` at ``path`` unless something is there; ``True`` if we wrote it.

    The bytes go to a unique temporary file first, are synced, and are then hard-linked into
    place, which fails if the name exists: readers never see a partial file, and of several
    concurrent writers exactly one wins.
    """
    temp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    with open(temp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(temp, path)
        won = True
    except FileExistsError:
        won = False
    except OSError:
        # A file system without hard links: replace is atomic too, but last writer wins.
        if path.exists():
            won = False
        else:
            os.replace(temp, path)
            _sync_directory(path.parent)
            return True
    finally:
        if temp.exists():
            temp.unlink()
    if won:
        _sync_directory(path.parent)
    return won


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
