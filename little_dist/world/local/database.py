"""The SQLite side of :class:`~little_dist.world.local.LocalWorld`: connections and transactions.

One connection per thread (SQLite connections are cheap to keep and costly to share), opened
lazily in WAL mode with ``synchronous = NORMAL``: a commit is atomic and survives a crash of
the process; only an OS crash or power loss may lose the last commits, and never tears one
(upstream's setting). ``sqlite3`` keeps each connection's statements prepared (the
statement cache), so the fixed SQL texts below are parsed once per connection.

Several processes may share the database: every write runs in one ``BEGIN IMMEDIATE``
transaction and is retried while another process holds the lock, up to ``busy_timeout``.
Within one process, writers take turns on a Python lock first: SQLite's busy handler waits
for a held database lock by sleeping (a millisecond and more per try), which a thread pool
of attempts writing at once would otherwise pay on almost every write.
``sqlite3`` errors surface as :class:`~little_dist.errors.StorageUnavailableError`.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from little_dist.errors import StorageUnavailableError

__all__ = ["EventDatabase"]

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
    # What each run id was first submitted with (claim_submission): one row, never changed.
    """CREATE TABLE IF NOT EXISTS submissions (
        run_id TEXT PRIMARY KEY,
        input_hash TEXT NOT NULL
    )""",
    # Events refused because their run had ended, kept for their model usage (late_events);
    # never part of the run's log. Once per occurrence id.
    """CREATE TABLE IF NOT EXISTS late_events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        type TEXT NOT NULL,
        occurrence_id TEXT,
        recorded_at TEXT NOT NULL,
        payload TEXT NOT NULL
    )""",
    """CREATE UNIQUE INDEX IF NOT EXISTS late_events_occurrence
        ON late_events (run_id, occurrence_id) WHERE occurrence_id IS NOT NULL""",
    # holder is NULL once released; the row stays so the token only grows.
    """CREATE TABLE IF NOT EXISTS leases (
        key TEXT PRIMARY KEY,
        holder TEXT,
        token INTEGER NOT NULL,
        expires_at REAL NOT NULL
    )""",
)


class EventDatabase:
    """``events.db`` under ``directory``: per-thread connections, retried transactions."""

    def __init__(self, path: Path, *, busy_timeout: float, label: str) -> None:
        self.path = path
        self._busy_timeout = busy_timeout
        self._label = label
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._pid = os.getpid()
        self._write_lock = threading.Lock()
        self._closed = False
        self.with_retry(self._create_schema)

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use)."""
        if self._closed:
            raise StorageUnavailableError(f"{self._label} is closed")
        if self._pid != os.getpid():  # forked: the parent's connections are not ours
            self._local = threading.local()
            self._connections = []
            self._write_lock = threading.Lock()
            self._pid = os.getpid()
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout,
                isolation_level=None,  # we issue BEGIN IMMEDIATE / COMMIT ourselves
                check_same_thread=False,  # so close() may close every thread's connection
                cached_statements=256,
            )
            conn.execute("PRAGMA synchronous = NORMAL")
            self._local.conn = conn
            with self._connections_lock:
                self._connections.append(conn)
        return conn

    def _create_schema(self) -> None:
        conn = self.connection()
        conn.execute("PRAGMA journal_mode = WAL")
        for statement in _SCHEMA:
            conn.execute(statement)

    def with_retry(self, body: Callable[[], _T]) -> _T:
        """Run ``body``, retrying while another process holds the database lock."""
        deadline: float | None = None
        delay = 0.005
        while True:
            try:
                return body()
            except sqlite3.OperationalError as error:
                if deadline is None:
                    deadline = time.monotonic() + self._busy_timeout
                if _is_busy(error) and time.monotonic() < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 0.1)
                    continue
                raise StorageUnavailableError(f"Event store unavailable: {error}") from error
            except sqlite3.Error as error:
                raise StorageUnavailableError(f"Event store unavailable: {error}") from error

    def write(self, body: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``body`` in one ``BEGIN IMMEDIATE`` transaction: all of it or none."""

        def attempt() -> _T:
            conn = self.connection()
            with self._write_lock:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = body(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            return result

        return self.with_retry(attempt)

    def read(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """All rows of one query (no transaction of ours: SQLite reads a consistent snapshot)."""
        return self.with_retry(lambda: self.connection().execute(sql, params).fetchall())

    def close(self) -> None:
        """Close every thread's connection; later use raises StorageUnavailableError."""
        self._closed = True
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()


def _is_busy(error: sqlite3.OperationalError) -> bool:
    text = str(error).lower()
    return "locked" in text or "busy" in text
