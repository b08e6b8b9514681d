"""``make_celery_app(settings)``: the fleet's Celery app, configured from the settings.

One queue per role (``little.planner``, ``little.orchestrator``, ``little.worker``,
``little.fixer`` unless renamed) and a route per task name, so a task sent by name from any
process lands on its role's queue. Celery only carries messages here: workflow state lives
in the world's event log, so there is no result backend (``task_ignore_result``) and no
chord. Delivery options that matter for a Redis broker:

* ``task_acks_late`` + ``task_reject_on_worker_lost``: a message whose worker died goes back
  to the queue. Correctness never depends on it (celery#5935, #7924: Redis may deliver a
  task twice, or not again): step leases and fenced commits decide what ran, and the
  scheduler re-dispatches attempts that never started.
* ``worker_prefetch_multiplier`` (default 1): model-bound steps are long; a worker holding
  queued messages hides them from idle workers and new replicas.
* ``broker_transport_options.visibility_timeout`` above the task time limit, and Celery's
  soft shutdown (``worker_soft_shutdown_timeout``) so SIGTERM lets running steps finish.
* task events on (``worker_send_task_events``, ``task_send_sent_event``) for Flower.
* a lost broker (Redis restarted) is reconnected to, up to
  ``broker_connection_max_retries`` times in a row, by a consumer that survives kombu's
  failing cleanup of the lost connection (:mod:`little_dist.fleet.consumer`); after that the
  worker exits with status 1, so its supervisor starts it again.

The tasks themselves are registered by :func:`little_dist.fleet.tasks.register_tasks`, which
this function calls; their bodies build the worker's world and app registry lazily, once per
process (after a prefork pool forks), from the same settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from little_dist.fleet.sending import (
    TASK_EXECUTE_STEP,
    TASK_FIX_STEP,
    TASK_ORCHESTRATE,
    TASK_PLAN,
    TASK_SUBMIT_RUN,
)
from little_dist.redis_tls import broker_use_ssl
from little_dist.settings import Role, Settings

if TYPE_CHECKING:
    from celery import Celery

    from little_dist.fleet.tasks import WorkerRuntime

__all__ = ["TASK_ROLES", "celery_config", "make_celery_app"]

#: The role (hence the queue) of every task.
TASK_ROLES: dict[str, Role] = {
    TASK_EXECUTE_STEP: "worker",
    TASK_FIX_STEP: "fixer",
    TASK_PLAN: "planner",
    TASK_ORCHESTRATE: "orchestrator",
    # Submitting compiles (or hands planning to little.plan): planner-side work.
    TASK_SUBMIT_RUN: "planner",
}


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery configuration the fleet runs with (see the module docstring)."""
    from kombu.entity import Exchange, Queue

    queues = [
        Queue(name, Exchange(name, type="direct"), routing_key=name)  # type: ignore[no-untyped-call]
        for name in settings.queues.values()
    ]
    config: dict[str, Any] = {
        "broker_url": settings.broker_url,
        "broker_connection_retry_on_startup": True,
        "broker_connection_retry": True,
        "broker_connection_max_retries": settings.broker_connection_max_retries,
        # A worker whose broker connection breaks reconnects (little_dist.fleet.consumer).
        "worker_consumer": "little_dist.fleet.consumer:FleetConsumer",
        "broker_transport_options": {"visibility_timeout": settings.broker_visibility_timeout},
        "result_backend": None,
        "task_ignore_result": True,
        "task_store_errors_even_if_ignored": False,
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_queues": queues,
        "task_default_queue": settings.queue_worker,
        "task_create_missing_queues": False,
        "task_routes": {
            name: {"queue": settings.queue_for(role), "routing_key": settings.queue_for(role)}
            for name, role in TASK_ROLES.items()
        },
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_soft_time_limit": settings.task_soft_time_limit,
        "task_time_limit": settings.task_time_limit,
        "worker_prefetch_multiplier": settings.worker_prefetch_multiplier,
        "worker_concurrency": settings.worker_concurrency,
        "worker_soft_shutdown_timeout": settings.soft_shutdown_timeout,
        "worker_enable_soft_shutdown_on_idle": True,
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        # A lost broker connection re-queues unacked messages anyway; stop running tasks
        # rather than let them commit after their message was handed to someone else.
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "enable_utc": True,
    }
    tls = broker_use_ssl(settings.broker_url)
    if tls is not None:
        # The URL's ssl_* options as Celery's own setting too (little_dist.redis_tls).
        config["broker_use_ssl"] = tls
    return config


def make_celery_app(settings: Settings, *, runtime: WorkerRuntime | None = None) -> Celery:
    """A configured Celery app with the fleet's tasks registered.

    ``runtime`` replaces what the task bodies use (world, app registry); by default it is
    built from ``settings`` on the first task in each process. Senders (client, scheduler)
    only need the configuration: tasks are sent by name.
    """
    from celery import Celery

    from little_dist.fleet.tasks import WorkerRuntime, register_tasks

    app = Celery("little", set_as_current=False)
    app.conf.update(celery_config(settings))
    register_tasks(app, runtime if runtime is not None else WorkerRuntime(settings))
    return app
