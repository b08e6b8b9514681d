"""What Redis remembers of an archived run once its keys are gone: one short hash field.

A run's own keys (its stream, occurrence index, seal marker) expire ``archive_ttl`` after
its archive (minutes). Redis must still know the run was archived after that: an append to
a run id it has forgotten would start a fresh log under it (a client resubmitting the id,
an observer's late fact), and reads must go to the S3 archive. A key per run costs ~100
bytes whatever it holds; a field in a small hash kept as a listpack costs ~40. So archived
runs are remembered as fields of bucket hashes::

    <prefix>archived:<generation>:<bucket>    hash run id -> the run's last sequence

``bucket`` is the CRC-32 of the run id modulo ``buckets``; ``generation`` is the archive
time divided by ``ttl`` (``LITTLE_ARCHIVE_MARKER_TTL``). A generation's buckets expire one
``ttl`` after the generation ends, so a run is remembered between one and two ``ttl`` after
its archive, and nothing stays without a TTL: Redis holds at most two generations of
``buckets`` hashes. A lookup reads the run's bucket in the generations before, at and after
the caller's clock (clocks of the fleet's machines may differ by less than ``ttl``).

A bucket stays a listpack up to Redis's ``hash-max-listpack-entries`` fields (128 by
default): ``buckets`` x 128 runs archived in one ``ttl``. Past that a bucket is a hash
table, ~90 bytes a run; raise ``buckets`` (the world's ``archive_marker_buckets``) to the
runs archived in one ``ttl`` divided by ~100 where that matters.

The keys of one run live in another cluster slot than its buckets, and the append and seal
scripts read both: like the signal stream, this wants a single Redis server.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from little_dist.errors import InvalidInputError
from little_dist.world.redis_s3.keys import KeyLayout

__all__ = ["DEFAULT_ARCHIVE_MARKER_BUCKETS", "ArchivedMarks"]

DEFAULT_ARCHIVE_MARKER_BUCKETS = 128


class ArchivedMarks:
    """The bucket hashes of archived runs (see the module docstring)."""

    def __init__(
        self,
        keys: KeyLayout,
        ttl_seconds: float,
        buckets: int = DEFAULT_ARCHIVE_MARKER_BUCKETS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not ttl_seconds > 0:
            raise InvalidInputError("archive_marker_ttl_seconds must be > 0")
        if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 1:
            raise InvalidInputError(f"archive_marker_buckets must be an integer >= 1: {buckets!r}")
        self._keys = keys
        self._ttl = ttl_seconds
        self._buckets = buckets
        self._clock = clock

    def _generation(self) -> int:
        return int(self._clock() // self._ttl)

    def _bucket(self, run_id: str) -> int:
        return zlib.crc32(run_id.encode()) % self._buckets

    def keys_of(self, run_id: str) -> list[str]:
        """The three bucket keys a lookup of ``run_id`` reads (generations before, at and
        after now)."""
        now, bucket = self._generation(), self._bucket(run_id)
        return [self._keys.archived_bucket(g, bucket) for g in (now - 1, now, now + 1)]

    def mark(self, pipe: Any, run_id: str, last: int) -> None:
        """Queue on ``pipe``: remember ``run_id`` as archived at sequence ``last``."""
        generation = self._generation()
        key = self._keys.archived_bucket(generation, self._bucket(run_id))
        pipe.hset(key, run_id, last)
        pipe.pexpireat(key, int((generation + 2) * self._ttl * 1000))

    def queue_lookup(self, pipe: Any, run_id: str) -> None:
        """Queue on ``pipe`` the reads :meth:`found` decodes (three replies)."""
        for key in self.keys_of(run_id):
            pipe.hget(key, run_id)

    @staticmethod
    def found(replies: Sequence[Any]) -> int | None:
        """The last sequence of an archived run from :meth:`queue_lookup`'s replies; None
        if Redis does not remember it."""
        for reply in replies:
            if reply is not None:
                return int(reply)
        return None

    def every_key(self) -> list[str]:
        """Every bucket that may hold a run (what :meth:`keys_of` reads, for all runs)."""
        now = self._generation()
        return [
            self._keys.archived_bucket(g, b)
            for g in (now - 1, now, now + 1)
            for b in range(self._buckets)
        ]
