"""Leases of :class:`~little_dist.world.local.LocalWorld`: SQL bodies, one transaction each.

A lease row stays after release (``holder`` NULL, ``expires_at`` 0) so that its token only
grows: every new tenure gets a larger token, and a fence naming an older token is refused.
A live lease whose holder's process is known to be gone (a crash on this machine, see
:mod:`little_dist.world.process_mark`) is taken as if it had expired.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from little_dist.world.base import Lease
from little_dist.world.local.event_log import check_fence
from little_dist.world.process_mark import holder_is_dead

__all__ = ["acquire", "release", "renew"]

_SELECT: Final = "SELECT holder, token, expires_at FROM leases WHERE key = ?"
_INSERT: Final = "INSERT INTO leases (key, holder, token, expires_at) VALUES (?, ?, 1, ?)"
_UPDATE: Final = "UPDATE leases SET holder = ?, token = ?, expires_at = ? WHERE key = ?"
_RENEW: Final = "UPDATE leases SET expires_at = ? WHERE key = ?"
_RELEASE: Final = (
    "UPDATE leases SET holder = NULL, expires_at = 0 "
    "WHERE key = ? AND token = ? AND holder IS NOT NULL AND (? = '' OR holder = ?)"
)


def acquire(
    conn: sqlite3.Connection, key: str, holder: str, ttl_seconds: float, now: float
) -> Lease | None:
    """Take ``key`` for ``holder`` (a free or expired lease gets the next token); ``None``
    when someone else holds it live. The same holder re-acquiring extends its tenure."""
    row = conn.execute(_SELECT, (key,)).fetchone()
    expires_at = now + ttl_seconds
    if row is None:
        conn.execute(_INSERT, (key, holder, expires_at))
        return Lease(key, holder, 1, expires_at)
    current, token, current_expiry = row
    live = current is not None and current_expiry > now
    if live and current != holder:
        if not holder_is_dead(current):
            return None
        live = False  # its process is gone (a crash): no need to wait for the expiry
    if not live:
        token += 1  # a new tenure: older holders' fences go stale
    conn.execute(_UPDATE, (holder, token, expires_at, key))
    return Lease(key, holder, int(token), expires_at)


def renew(conn: sqlite3.Connection, lease: Lease, ttl_seconds: float, now: float) -> Lease:
    """Extend ``lease`` to ``now + ttl_seconds``; LeaseLostError if it is no longer held."""
    check_fence(conn, lease.fence, now)
    expires_at = now + ttl_seconds
    conn.execute(_RENEW, (expires_at, lease.key))
    return Lease(lease.key, lease.holder, lease.token, expires_at)


def release(conn: sqlite3.Connection, lease: Lease) -> None:
    """Free ``lease`` if its tenure is still the current one: its token, and its holder
    unless that is empty (a fence's release by token alone); else do nothing."""
    conn.execute(_RELEASE, (lease.key, lease.token, lease.holder, lease.holder))
