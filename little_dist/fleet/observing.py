"""Turn metrics and traces on in a fleet process, from its settings and environment.

``little worker`` calls :func:`observe_worker`, ``little scheduler`` :func:`observe_scheduler`
(see :mod:`little_dist.observability`). With ``LITTLE_METRICS_PORT`` unset and no OTLP
endpoint configured, neither does anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from little_dist.fleet.app import TASK_ROLES
from little_dist.fleet.versions import VersionCache, workflow_name_of_part
from little_dist.observability import hooks
from little_dist.observability.metrics import enable_metrics, prepare_multiprocess
from little_dist.observability.traces import enable_tracing_from_env
from little_dist.settings import ROLES, Settings

if TYPE_CHECKING:
    from little_dist.fleet.scheduler import Scheduler
    from little_dist.world.base import World

__all__ = ["observe_scheduler", "observe_worker", "queue_depths"]

#: kombu's Redis transport keeps a queue's priority levels in lists named ``name`` and
#: ``name + SEP + level`` (its default ``priority_steps`` [0, 3, 6, 9]).
_PRIORITY_SEP = "\x06\x16"
_PRIORITY_STEPS = (3, 6, 9)


def _namer(world: Callable[[], World], versions: VersionCache) -> Callable[[str], str | None]:
    """A version's workflow name: from the process's version cache (the run that just ended
    was decided with it), else from the world."""

    def name(version_id: str) -> str | None:
        found = world()
        if version_id in versions:
            metadata = versions.get(found, version_id).lwir.get("metadata")
            named = metadata.get("name") if isinstance(metadata, Mapping) else None
            return named if isinstance(named, str) else None
        doc = found.get_version(version_id)
        lwir = doc.get("lwir")
        if isinstance(lwir, Mapping):
            metadata = lwir.get("metadata")
            named = metadata.get("name") if isinstance(metadata, Mapping) else None
            return named if isinstance(named, str) else None
        return workflow_name_of_part(found, doc)

    return name


def observe_worker(
    settings: Settings, world: Callable[[], World], versions: VersionCache, *, pool: str
) -> None:
    """Metrics on ``LITTLE_METRICS_PORT`` (multiprocess under a prefork pool) and traces when
    an OTLP endpoint is configured; every task labels its attempts with its queue's role."""
    enable_tracing_from_env("little-worker")
    if settings.metrics_port is None:
        return
    if pool == "prefork":
        prepare_multiprocess()
    enable_metrics("worker", port=settings.metrics_port)
    hooks.set_version_namer(_namer(world, versions))
    from celery.signals import task_prerun

    def started(task: Any = None, **_: Any) -> None:
        hooks.task_started(TASK_ROLES.get(getattr(task, "name", ""), "worker"))

    task_prerun.connect(started, weak=False)


def observe_scheduler(settings: Settings, scheduler: Scheduler) -> None:
    """Metrics on ``LITTLE_METRICS_PORT``, with the queue depth per role and the archive
    backlog read at each scrape."""
    enable_tracing_from_env("little-scheduler")
    if settings.metrics_port is None:
        return
    metrics = enable_metrics("scheduler", port=settings.metrics_port)
    hooks.set_version_namer(_namer(lambda: scheduler.world, scheduler.versions))
    broker = _broker_client(settings)
    if broker is not None:
        metrics.gauge_from(
            "little_queue_depth",
            "Tasks waiting in each role's queue (the broker's lists)",
            ("role",),
            lambda: {(role,): float(n) for role, n in queue_depths(broker, settings).items()},
        )
    metrics.gauge_from(
        "little_archive_backlog",
        "Finished runs whose log waits to be archived to S3",
        (),
        lambda: {(): float(scheduler.finished.backlog())},
    )


def _broker_client(settings: Settings) -> Any:
    if not settings.broker_url.startswith(("redis://", "rediss://", "unix://")):
        return None  # (another broker: its own exporter knows its queues)
    import redis

    return redis.Redis.from_url(settings.broker_url, socket_timeout=5, socket_connect_timeout=5)


def queue_depths(client: Any, settings: Settings) -> dict[str, int]:
    """The messages waiting in each role's queue, all priority levels, in one round trip."""
    pipe = client.pipeline(transaction=False)
    for role in ROLES:
        name = settings.queue_for(role)
        pipe.llen(name)
        for level in _PRIORITY_STEPS:
            pipe.llen(f"{name}{_PRIORITY_SEP}{level}")
    counts = pipe.execute()
    per = 1 + len(_PRIORITY_STEPS)
    return {role: sum(counts[i * per : (i + 1) * per]) for i, role in enumerate(ROLES)}
