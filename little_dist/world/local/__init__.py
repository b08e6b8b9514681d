"""``LocalWorld``: SQLite (WAL) plus files under one data directory; the embedded default.

Layout of ``<data_dir>`` (upstream's, except that blobs are named by their content hash, so
the same bytes are stored once)::

    events/events.db            events (run_id, sequence), leases and the version index,
                                SQLite in WAL mode
    artifacts/<artifactId>.json manifest, canonical JSON
    artifacts/blobs/<sha256>    payload bytes
    versions/<versionId>.json   immutable workflow versions, canonical JSON

Several processes on one machine may share a data directory: every append runs in a
``BEGIN IMMEDIATE`` transaction (look up the occurrence ids, check the fence and the
expected sequence, insert), and leases live in the same database, so a fenced append is
atomic with its lease check. Files are written to a temporary name, synced, and linked into
place (put-if-absent: the first writer wins, later writers read what it wrote).

Modules: :mod:`.world` (the class), :mod:`.database` (connections, transactions),
:mod:`.event_log` (append and read bodies), :mod:`.leases`, :mod:`.files` (artifacts and
versions). ``sqlite3`` and OS errors surface as
:class:`~little_dist.errors.StorageUnavailableError`, raised from the original.
"""

from __future__ import annotations

from little_dist.world.local.world import DEFAULT_DATA_DIR, LocalWorld

__all__ = ["DEFAULT_DATA_DIR", "LocalWorld"]
