"""The HTTP API (``little serve``): runs submitted, read and watched over HTTP.

A FastAPI app on uvicorn over the same :class:`~little_dist.fleet.client.Client` as
``little submit``/``status``: nothing here submits, folds or follows a run its own way.
Modules keep FastAPI out of ``little --help``: import them directly.

* :mod:`.app` — ``make_app(fleet)``: the routes (``/v1/runs``: submit, list, status,
  report, cancel, events; ``/v1/workflows``; the probes); :mod:`.cursors` — list pages;
  :mod:`.fleet_access` — what they reach (the client, the fleet's Redis, the app's
  workflows), opened once per process.
* :mod:`.models` — request and response bodies (the OpenAPI document is built from them).
* :mod:`.problems` — RFC 9457 ``application/problem+json`` errors, for every refusal.
* :mod:`.tokens` — bearer tokens with scopes, stored hashed in Redis; :mod:`.auth` — the
  scope each route requires.
* :mod:`.idempotency` — ``Idempotency-Key`` on ``POST /v1/runs``.
* :mod:`.event_stream` — a run's events as Server-Sent Events, resumable by
  ``Last-Event-ID``.
* :mod:`.health` — ``/readyz``: Redis and S3 reachable.
* :mod:`.body_limit` — a request body over the cap is a 413 before it is all read.
* :mod:`.metrics` — the process's ``/metrics``: requests, latency, streams open.
* :mod:`.viewer` — the live run viewer (``/ui``): runs, a run's timeline as it grows.
"""

from __future__ import annotations

__all__: list[str] = []
