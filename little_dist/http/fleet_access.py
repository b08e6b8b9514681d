"""What the HTTP API's routes reach, opened once per process: :class:`FleetAccess`.

One :class:`~little_dist.fleet.client.Client` (the one ``little submit`` uses: its world, its
Celery app, its queues), the fleet's Redis (tokens, idempotency keys, readiness) and the
served app's workflows (what ``POST /v1/runs`` accepts by id). Routes run in the server's
thread pool: the client's first submission opens what it keeps (the fleet's Redis, its
one-trip starts) under a lock, so concurrent first requests open it once.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Final

from little_dist.errors import InvalidInputError
from little_dist.http.idempotency import IdempotencyKeys
from little_dist.http.rate_limits import TokenRates
from little_dist.http.tokens import TokenStore
from little_dist.world.fleet_keys import api_rate_prefix, api_tokens_key, idempotency_key

if TYPE_CHECKING:
    from little_dist.fleet.app_registry import AppRegistry
    from little_dist.fleet.client import Client
    from little_dist.settings import Settings
    from little_dist.world.base import World

__all__ = ["FleetAccess", "open_redis"]

#: The event loop's connections to Redis (each request's token check).
_ASYNC_CONNECTIONS: Final = 64


def open_redis(settings: Settings) -> Any:
    """The fleet's Redis (where its world and signal stream live); refused for a fleet
    whose world is not on Redis (tokens and idempotency keys live there)."""
    from little_dist.fleet.worker_slots import fleet_redis

    client = fleet_redis(settings)
    if client is None:
        raise InvalidInputError(
            "the HTTP API serves a fleet on Redis: set LITTLE_WORLD to a redis:// URL"
        )
    return client


class FleetAccess:
    """The fleet as the routes see it (see the module docstring); closed with :meth:`close`."""

    def __init__(self, settings: Settings, registry: AppRegistry | None) -> None:
        self.settings = settings
        self.registry = registry
        self._lock = threading.Lock()
        self._client: Client | None = None
        self._world: World | None = None
        self._redis: Any = None
        self._async_redis: Any = None
        self._warm = False
        self._rates: TokenRates | None = None

    @property
    def redis(self) -> Any:
        with self._lock:
            if self._redis is None:
                self._redis = open_redis(self.settings)
            return self._redis

    @property
    def async_redis(self) -> Any:
        """A ``redis.asyncio`` client of the fleet's Redis, for the server's event loop (each
        request's token check: no thread and no wait for one); made in that loop, on first
        use, and closed by :meth:`aclose`."""
        if self._async_redis is None:
            from redis.asyncio import BlockingConnectionPool
            from redis.asyncio import Redis as AsyncRedis

            from little_dist.world.factory import fleet_redis_url

            url = fleet_redis_url(self.settings)
            if url is None:
                return open_redis(self.settings)  # refused, saying why
            # Blocking: a thousand requests at once wait for one of its connections (a
            # check is one HGET) instead of failing with "Too many connections" past the
            # plain pool's 100.
            pool = BlockingConnectionPool.from_url(
                url,
                max_connections=_ASYNC_CONNECTIONS,
                timeout=10,
                socket_timeout=10,
                socket_connect_timeout=10,
            )
            self._async_redis = AsyncRedis.from_pool(pool)  # (closed with it)
        return self._async_redis

    async def aclose(self) -> None:
        """Close the event loop's client (in that loop)."""
        if self._async_redis is not None:
            client, self._async_redis = self._async_redis, None
            await client.aclose()

    @property
    def client(self) -> Client:
        with self._lock:
            if self._client is None:
                from little_dist.fleet.client import Client
                from little_dist.world.factory import world_from_settings

                # Opened here, under the lock (the client would open it at first use, as
                # many times as requests race to it); closed by close().
                self._world = world_from_settings(self.settings)
                self._client = Client(self.settings, world=self._world, registry=self.registry)
            return self._client

    def tokens(self) -> TokenStore:
        return TokenStore(self.redis, api_tokens_key(self.settings.signal_stream))

    def rates(self) -> TokenRates:
        redis = self.redis
        with self._lock:
            if self._rates is None:
                from little_dist.world.factory import fleet_redis_url

                url = fleet_redis_url(self.settings) or ""
                prefix = api_rate_prefix(self.settings.signal_stream)
                self._rates = TokenRates(redis, url, prefix)
            return self._rates

    def idempotency(self) -> IdempotencyKeys:
        stream = self.settings.signal_stream
        return IdempotencyKeys(self.redis, lambda digest: idempotency_key(stream, digest))

    def workflow_ids(self) -> list[str]:
        return sorted(self.registry.workflows) if self.registry is not None else []

    def submit(
        self,
        workflow: str,
        run_input: Any,
        run_id: str,
        budget_usd: float | None,
        deadline: str | None = None,
        callback_url: str | None = None,
    ) -> str:
        """``Client.submit``; the first call of the process alone (it opens what the client
        keeps for the next ones)."""
        client = self.client
        if not self._warm:
            with self._lock:
                if not self._warm:
                    done = client.submit(
                        workflow,
                        run_input,
                        run_id=run_id,
                        budget_usd=budget_usd,
                        deadline=deadline,
                        callback_url=callback_url,
                    )
                    self._warm = True
                    return done
        return client.submit(
            workflow,
            run_input,
            run_id=run_id,
            budget_usd=budget_usd,
            deadline=deadline,
            callback_url=callback_url,
        )

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
            if self._world is not None:
                self._world.close()
                self._world = None
            self._rates = None
            if self._redis is not None:
                self._redis.close()
                self._redis = None
