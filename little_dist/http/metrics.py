"""The API process's own Prometheus metrics, served on its ``/metrics``.

Requests by route and status, how long they took, and the event streams open now. Each app
(:func:`~little_dist.http.app.make_app`) keeps them in a registry of its own, not
``prometheus_client``'s global one (a test makes several apps). Labels are bounded: the
route is its template (``/v1/runs/{run_id}``, never a run id), ``unmatched`` for a path no
route takes; the method one of HTTP's (else ``other``).

A request's duration runs to the start of its answer (its status and headers): an event
stream's is how long it took to start streaming, not how long someone watched. The streams
open are counted by :class:`~little_dist.http.event_stream.Watchers`, read at scrape time.

``docs/operations.md`` lists the series.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["REQUEST_BUCKETS", "ApiMetrics", "RequestMetrics"]

#: From a probe's microseconds to a submission's tens of milliseconds and a slow list.
REQUEST_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class ApiMetrics:
    """The series of one app (see the module docstring); ``watchers`` is read at scrape
    time."""

    def __init__(self, watchers: Callable[[], int]) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "little_api_requests_total",
            "HTTP requests answered, by method, route template and status",
            ["method", "route", "status"],
            registry=r,
        )
        self.seconds = Histogram(
            "little_api_request_duration_seconds",
            "Seconds from a request to the start of its answer, by method and route template",
            ["method", "route"],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        watching = Gauge(
            "little_api_sse_watchers",
            "Server-Sent Event streams of runs' events open now",
            registry=r,
        )
        watching.set_function(lambda: float(watchers()))
        Info("little_process", "What this process is", registry=r).info({"process": "api"})

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.seconds.labels(method, route).observe(seconds)

    def exposition(self) -> tuple[bytes, str]:
        """The text a scrape gets, and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def _route(scope: Scope) -> str:
    route: Any = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


class RequestMetrics:
    """ASGI middleware: every HTTP request counted and timed into ``metrics``."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        recorded = False

        def record(status: int) -> None:
            nonlocal recorded
            recorded = True
            method = scope.get("method", "")
            method = method if method in _METHODS else "other"
            self.metrics.observe(method, _route(scope), status, time.perf_counter() - started)

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and not recorded:
                record(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            if not recorded:  # an error no handler answered (the server answers 500)
                record(500)
