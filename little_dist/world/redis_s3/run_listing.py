"""Which runs Redis knows: the run index (runs not archived yet) and the buckets of
archived runs (:mod:`~little_dist.world.redis_s3.archived`). A run archived longer ago than
its bucket lives is known only to S3."""

from __future__ import annotations

import redis

from little_dist.world.redis_s3.archived import ArchivedMarks
from little_dist.world.redis_s3.keys import KeyLayout
from little_dist.world.redis_s3.redis_calls import redis_errors, text

__all__ = ["RunListing"]


class RunListing:
    """The run ids behind ``World.list_run_ids`` and ``list_unarchived_run_ids``."""

    def __init__(self, client: redis.Redis, keys: KeyLayout, marks: ArchivedMarks) -> None:
        self._redis, self._keys, self._marks = client, keys, marks

    def every(self) -> list[str]:
        """Runs Redis knows: not archived yet, or archived within the marker TTL."""
        live = self.unarchived()
        with redis_errors("listing runs"):
            pipe = self._redis.pipeline(transaction=False)
            for key in self._marks.every_key():
                pipe.hkeys(key)
            buckets = pipe.execute()
        # An archived run whose bucket expired is forgotten: only S3 knows it now.
        return sorted({*live, *(text(r) for bucket in buckets for r in bucket)})

    def unarchived(self) -> list[str]:
        """Runs whose archive has not completed: live runs, and ended ones the scheduler
        still has to archive. Read from the run index, which holds only those (archived
        runs leave it), so the cost follows the live runs, not the history."""
        index = self._keys.run_index
        with redis_errors("listing runs"):
            run_ids = [text(m) for m in self._redis.zrange(index, 0, -1)]
            pipe = self._redis.pipeline(transaction=False)
            for run_id in run_ids:
                keys = self._keys.run(run_id)
                pipe.exists(keys.events, keys.archived)
                self._marks.queue_lookup(pipe, run_id)
            replies = pipe.execute() if run_ids else []
            found, archived = [], []
            for position, run_id in enumerate(run_ids):
                present, *marked = replies[4 * position : 4 * position + 4]
                # The index is written beside a run's first append, even one that was
                # refused: a run never written (left out), or a late writer's append to an
                # archived run, whose entry goes (archived is for good, so no race).
                if self._marks.found(marked) is not None:
                    archived.append(run_id)
                elif present:
                    found.append(run_id)
            if archived:
                self._redis.zrem(index, *archived)
        return sorted(found)
