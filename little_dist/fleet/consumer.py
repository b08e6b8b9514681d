"""The worker's Celery consumer: a Redis that goes away mid-delivery is reconnected to.

Celery 5.7 (with kombu 5.7) cleans up a broken broker connection by collecting it and then
closing it. When a message was delivered and not yet acknowledged (an ``acks_late`` step
running, or finishing while Redis was down), the close runs the channel's close a second
time; that tries to put the message back through a connection pool which the collect has
already detached from its connection, and kombu raises ``AttributeError: 'NoneType' object
has no attribute 'hostname'``. Celery does not count that as a connection error: the worker
logs "Unrecoverable error" and stops instead of reconnecting.

The connection is being thrown away at that point, and the message need not be put back by
it: kombu keeps it in Redis's unacked index (restored after the visibility timeout), and the
fleet does not depend on it anyway (step leases expire, the scheduler sends steps that never
started again). So :class:`FleetConsumer` lets the close of the lost connection fail, logs
it, and Celery goes on to reconnect.
"""

from __future__ import annotations

import logging

from celery.worker.consumer import Consumer

__all__ = ["FleetConsumer"]

_log = logging.getLogger("little.worker")


class FleetConsumer(Consumer):  # type: ignore[misc]
    """Celery's consumer, whose cleanup of a lost broker connection cannot stop the worker."""

    def on_connection_error_after_connected(self, exc: BaseException) -> None:
        connection = self.connection
        if connection is not None:
            close = connection.close

            def close_lost_connection() -> None:
                try:
                    close()
                except AttributeError as error:
                    _log.warning("the lost broker connection did not close cleanly: %r", error)

            # Only this throw-away connection's close changes (Celery calls it next).
            connection.close = close_lost_connection
        super().on_connection_error_after_connected(exc)
