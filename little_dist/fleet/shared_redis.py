"""A fleet on one Redis: :class:`SharedRedis`, and :func:`shared_redis`, which finds out.

When the world's Redis (its event logs and leases), the scheduler's (its signal stream and
set of active runs) and the broker's (Celery's queue lists) are one server and database, a
submit can start a run and send its first tasks in one Lua script, one round trip
(:mod:`~little_dist.fleet.submission`). Anywhere else (a broker on another Redis or not on
Redis, a queue that is not Celery's, a world of its own) submits go the step-by-step way.
"""

from __future__ import annotations

from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from little_dist.settings import Settings
from little_dist.world.base import World
from little_dist.world.extras import extras_of
from little_dist.world.fleet_keys import active_runs_key

if TYPE_CHECKING:
    from little_dist.fleet.queue import CeleryQueue, TaskQueue

__all__ = ["SharedRedis", "shared_redis"]


@dataclass(frozen=True)
class SharedRedis:
    """A fleet whose world, scheduler (its set of active runs ``active_runs``) and broker
    (``queue``'s) live on one Redis server and database. ``looks`` runs the S3 look a run
    id given by the caller costs, beside the rest of the submit."""

    queue: CeleryQueue
    active_runs: str
    looks: Executor

    def look(self, world: World, run_id: str) -> Future[bool] | None:
        """Whether S3 holds an archive of ``run_id``, asked on another thread (``None``: the
        world cannot say)."""
        archives = extras_of(world).archives
        if archives is None:
            return None
        return self.looks.submit(archives.has_archive, run_id)


def shared_redis(
    world: World, queue: TaskQueue, settings: Settings, looks: Executor
) -> SharedRedis | None:
    """The fleet as a :class:`SharedRedis` when ``world`` (a ``RedisS3World``), the fleet's
    Redis (:func:`~little_dist.world.factory.fleet_redis_url`) and ``queue``'s broker (a
    :class:`~little_dist.fleet.queue.CeleryQueue` whose messages can be printed) are one
    Redis server and database; ``None`` otherwise. Nothing is connected to."""
    from little_dist.fleet.queue import CeleryQueue
    from little_dist.world.factory import fleet_redis_url
    from little_dist.world.redis_s3 import RedisS3World

    if not isinstance(world, RedisS3World) or not isinstance(queue, CeleryQueue):
        return None
    fleet_url = fleet_redis_url(settings)
    if fleet_url is None or queue.broker_db is None:
        return None
    where = world.redis_address()
    broker_url = str(queue.app.conf.broker_url)
    if where != _address(fleet_url) or where != _address(broker_url):
        return None
    return SharedRedis(queue, active_runs_key(settings.signal_stream), looks)


def _address(url: str) -> tuple[Any, ...]:
    import redis

    from little_dist.world.redis_s3.redis_calls import redis_address

    return redis_address(redis.Redis.from_url(url))  # (a client object: not connected)
