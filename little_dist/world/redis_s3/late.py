"""The late record of a run on :class:`RedisS3World`: events its log refused because the run
had ended, kept in S3 for their model usage.

A refusal is rare (a step that was in flight when its run was cancelled or failed), and
usually comes after the run's log was archived to S3 (``LITTLE_ARCHIVE_DELAY`` after its
end), when the Redis keys of the run are on their way out: so the record is an immutable S3
object per refused append, ``late/<run_id>/<sha256>.ndjson``, named by the hash of what it
records (type, occurrence id, payload; not the time), so an append refused again after a
lost reply writes nothing new. It is written by the refused writer right after Redis refused
the append, so a writer that dies in between loses that record (milliseconds, once).

Reading lists the run's prefix (one S3 list call, one get per object: none for almost every
run) and keeps the first record of each occurrence id.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from little_dist.canonical import canonical_json
from little_dist.world.base import LateEvent
from little_dist.world.redis_s3.keys import KeyLayout
from little_dist.world.redis_s3.s3 import S3Objects

__all__ = ["LateRecords"]


class LateRecords:
    """Writes and reads the late records of runs (see the module docstring)."""

    def __init__(self, objects: S3Objects, keys: KeyLayout) -> None:
        self._s3 = objects
        self._keys = keys

    def keep(self, run_id: str, late: Sequence[LateEvent]) -> None:
        """Store ``late`` (nothing when empty)."""
        if not late:
            return
        what = canonical_json([[e.type, e.occurrence_id, e.payload] for e in late])
        digest = hashlib.sha256(what.encode("utf-8")).hexdigest()
        body = "".join(
            json.dumps(e.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n" for e in late
        ).encode("utf-8")
        self._s3.put_if_absent(self._keys.late(run_id, digest), body, "application/x-ndjson")

    def read(self, run_id: str) -> list[LateEvent]:
        """The run's late record, oldest first, one event per occurrence id."""
        found: list[LateEvent] = []
        for key in self._s3.list_keys(self._keys.late_prefix(run_id)):
            body = self._s3.get(key)
            if body is None:
                continue
            found += [
                LateEvent.from_json(json.loads(line))
                for line in body.decode("utf-8").splitlines()
                if line
            ]
        found.sort(key=lambda event: event.recorded_at)
        seen: set[str] = set()
        out: list[LateEvent] = []
        for event in found:
            if event.occurrence_id is not None:
                if event.occurrence_id in seen:
                    continue
                seen.add(event.occurrence_id)
            out.append(event)
        return out
