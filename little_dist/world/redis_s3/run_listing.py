"""Which runs there are: the run index in Redis (runs not archived yet) and the archives in
S3 (:mod:`~little_dist.world.redis_s3.archive`). Redis keeps nothing of an archived run once
its keys expire, so S3 is where archived runs are listed."""

from __future__ import annotations

import redis

from little_dist.world.redis_s3.archive import RunArchives
from little_dist.world.redis_s3.keys import KeyLayout
from little_dist.world.redis_s3.redis_calls import LuaScript, redis_errors, text

__all__ = ["RunListing"]

#: Drops a run from the index unless its stream is there without a TTL, checked in the same
#: step (a start landing meanwhile keeps its entry): an archived run's stream expires.
_FORGET_IF_GONE = """
-- KEYS: 1 the run index, 2 the run's stream. ARGV: 1 the run id.
if redis.call('PTTL', KEYS[2]) ~= -1 then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
"""


class RunListing:
    """The run ids behind ``World.list_run_ids`` and ``list_unarchived_run_ids``."""

    def __init__(self, client: redis.Redis, keys: KeyLayout, archives: RunArchives) -> None:
        self._redis, self._keys, self._archives = client, keys, archives
        self._forget = LuaScript(client, _FORGET_IF_GONE, idempotent=True)

    def every(self) -> list[str]:
        """Every run: not archived yet (Redis), or archived (S3's ``archives/``; one list
        request a thousand runs)."""
        return sorted({*self.unarchived(), *self._archives.archived_run_ids()})

    def forget(self, run_id: str) -> None:
        """Drop ``run_id`` from the run index unless its log is in Redis without a TTL (see
        :data:`_FORGET_IF_GONE`)."""
        with redis_errors("listing runs"):
            self._forget([self._keys.run_index, self._keys.run(run_id).events], [run_id])

    def unarchived(self) -> list[str]:
        """Runs whose archive has not completed: live runs, and ended ones the scheduler
        still has to archive. Read from the run index, which holds only those (archived
        runs leave it), so the cost follows the live runs, not the history."""
        index = self._keys.run_index
        with redis_errors("listing runs"):
            run_ids = [text(m) for m in self._redis.zrange(index, 0, -1)]
            pipe = self._redis.pipeline(transaction=False)
            for run_id in run_ids:
                pipe.pttl(self._keys.run(run_id).events)
            ttls = pipe.execute() if run_ids else []
            found = []
            for run_id, ttl in zip(run_ids, ttls, strict=True):
                # A stream without a TTL: live, or ended and not archived yet (its archive
                # sets the TTL and leaves the index in one step). The entry of a run whose
                # stream expires or is gone goes: indexed again beside a late writer's
                # append that was refused, or a log lost.
                if ttl == -1:
                    found.append(run_id)
                else:
                    self.forget(run_id)
        return sorted(found)
