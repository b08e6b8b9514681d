"""``Client("https://host:8080", token=...)``: the same ``Client``, over ``little serve``'s
HTTP API only (:class:`HttpClient`).

A service that submits and watches runs then needs ``httpx`` and a token, not Redis, S3 or
Celery credentials: this path imports none of them. What it does is what the API offers:
``submit`` (by workflow id; ``run_id``, ``budget_usd``, ``deadline``, and an
``idempotency_key``), ``submit_many`` (one request each), ``status``, ``report``,
``events`` (``follow``: Server-Sent Events, reconnecting with ``Last-Event-ID`` so nothing
is lost or repeated), ``state`` and ``wait`` (the events folded into the same
:class:`~little_dist.run_state.RunState`), ``cancel``, ``approvals``, ``approve`` and
``reject`` (:mod:`~little_dist.fleet.approval_calls`). What needs the fleet's storage
(``world``, ``app``, ``queue``, ``window``, ``settings``) raises :class:`NotOverHttpError`.
The server's refusals become the errors the Redis ``Client`` raises (see
:mod:`~little_dist.fleet.http_answers`).

Differences from a ``Client`` on the fleet's settings: a step output stored by reference
(over the inline limit) is not read back into the folded state (its ``outputRef`` is
there); ``cycle``, ``timeout`` and ``max_attempts`` are not taken by the API.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn

import httpx

from little_dist.errors import InvalidInputError, StorageUnavailableError
from little_dist.events import RUN_END_EVENT_TYPES, Event
from little_dist.fleet.approval_calls import HttpApprovals
from little_dist.fleet.client import Client, WaitTimeoutError
from little_dist.fleet.http_answers import (
    NotOverHttpError,
    error_of,
    problem_of,
    sse_messages,
    status_view,
)
from little_dist.fleet.run_status import RunStatusView
from little_dist.ids import validate_run_id
from little_dist.litellm_prices import litellm_price_fallback
from little_dist.run_state import RunState, RunStateBuilder

if TYPE_CHECKING:
    from celery import Celery

    from little_dist.authoring import WorkflowDefinition
    from little_dist.compiler import WorkflowVersion
    from little_dist.fleet.queue import TaskQueue
    from little_dist.fleet.worker_slots import FanoutWindow
    from little_dist.pricing import PriceFallback
    from little_dist.settings import Settings
    from little_dist.world.base import World

__all__ = ["TOKEN_ENV", "HttpClient"]

#: The token's environment variable, read when ``token`` is not given.
TOKEN_ENV: Final = "LITTLE_API_TOKEN"
#: The longest an events stream goes without a byte before it is reconnected (the server
#: sends a keep-alive every 10 s).
_STALL_S: Final = 30.0
_RECONNECTS: Final = 5
_FOLD_BATCH: Final = 256


def _no(what: str) -> NoReturn:
    raise NotOverHttpError(
        f"Client(url).{what}: a client of the HTTP API reaches no Redis, S3 or broker; "
        "use Client(settings) on the fleet for it"
    )


class HttpClient(HttpApprovals, Client):
    """A ``Client`` on ``little serve`` (``Client(url, token=...)`` makes one; see the module
    docstring). ``token``: a bearer token (``little tokens create``; default
    ``$LITTLE_API_TOKEN``); ``timeout``: seconds per request (an events stream waits as
    long as it is asked to); ``transport``: httpx's (tests, proxies)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        pricing_fallback: PriceFallback | None = litellm_price_fallback,
    ) -> None:
        parsed = httpx.URL(url)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise InvalidInputError(f"Client({url!r}): expected an http(s)://host:port URL")
        self.url = str(parsed).rstrip("/")
        self.pricing_fallback = pricing_fallback
        self.registry = None
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = timeout
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, transport=transport
        )

    # -- what needs the fleet's storage ----------------------------------------------------

    @property
    def settings(self) -> Settings:
        _no("settings")

    @settings.setter
    def settings(self, value: Settings) -> None:
        _no("settings")

    @property
    def world(self) -> World:
        _no("world")

    @property
    def app(self) -> Celery:
        _no("app")

    @property
    def queue(self) -> TaskQueue:
        _no("queue")

    @property
    def window(self) -> FanoutWindow | None:
        _no("window")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> HttpClient:
        return self

    # -- requests ------------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        run_id: str | None = None,
        json_body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        try:
            answer = self._http.request(method, path, json=json_body, headers=headers)
        except httpx.TransportError as exc:
            raise StorageUnavailableError(
                f"{method} {self.url}{path}: the server could not be reached: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if answer.status_code >= 400:
            raise error_of(
                answer.status_code,
                problem_of(answer.text),
                what=f"{method} {path}",
                run_id=run_id,
                retry_after=answer.headers.get("retry-after"),
            )
        return answer

    # -- runs ----------------------------------------------------------------------------------

    def submit(
        self,
        workflow: WorkflowDefinition | WorkflowVersion | Mapping[str, Any] | str,
        input: Any = None,
        *,
        run_id: str | None = None,
        cycle: Mapping[str, Any] | None = None,
        budget_usd: float | None = None,
        deadline: Any = None,
        timeout: str | float | None = None,
        max_attempts: int | None = None,
        idempotency_key: str | None = None,
        callback_url: str | None = None,
    ) -> str:
        """``POST /v1/runs``; the run id. ``workflow``: the id of a workflow the server's
        app defines (or its definition, by its id). ``idempotency_key``: the same key and
        body answer the same run (another body under it: :class:`ApiConflictError`)."""
        unsupported = {"cycle": cycle, "timeout": timeout, "max_attempts": max_attempts}
        given = [name for name, value in unsupported.items() if value is not None]
        if given:
            raise InvalidInputError(
                f"Client(url).submit: {', '.join(given)} is not taken by the HTTP API"
            )
        body: dict[str, Any] = {"workflow": _workflow_id(workflow)}
        if input is not None:
            body["input"] = input
        if run_id is not None:
            body["runId"] = run_id
        if budget_usd is not None:
            body["budgetUsd"] = budget_usd
        if deadline is not None:
            body["deadline"] = _deadline(deadline)
        if callback_url is not None:
            body["callbackUrl"] = callback_url
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None
        answer = self._request("POST", "/v1/runs", json_body=body, headers=headers)
        return str(answer.json()["runId"])

    def submit_many(
        self,
        workflow: WorkflowDefinition | WorkflowVersion | Mapping[str, Any] | str,
        inputs: Sequence[Any],
        *,
        run_ids: Sequence[str] | None = None,
        budget_usd: float | None = None,
        deadline: Any = None,
        timeout: str | float | None = None,
        max_attempts: int | None = None,
        callback_url: str | None = None,
    ) -> list[str]:
        """One ``POST /v1/runs`` per input (``run_ids``: theirs); the ids, in order."""
        if run_ids is not None and len(run_ids) != len(inputs):
            raise InvalidInputError(f"submit_many: {len(run_ids)} run ids for {len(inputs)} inputs")
        return [
            self.submit(
                workflow,
                run_input,
                run_id=None if run_ids is None else run_ids[index],
                budget_usd=budget_usd,
                deadline=deadline,
                timeout=timeout,
                max_attempts=max_attempts,
                callback_url=callback_url,
            )
            for index, run_input in enumerate(inputs)
        ]

    def status(self, run_id: str) -> RunStatusView:
        """``GET /v1/runs/{id}`` (:class:`RunNotFoundError` for an unknown run)."""
        validate_run_id(run_id)
        return status_view(self._request("GET", f"/v1/runs/{run_id}", run_id=run_id).json())

    def report(self, run_id: str) -> dict[str, Any]:
        """``GET /v1/runs/{id}/report``: the report as ``little report --json`` prints it."""
        validate_run_id(run_id)
        report: dict[str, Any] = self._request(
            "GET", f"/v1/runs/{run_id}/report", run_id=run_id
        ).json()
        return report

    def cancel(self, run_id: str, reason: str | None = None) -> bool:
        """``POST /v1/runs/{id}/cancel``; ``False`` if the run had already ended."""
        validate_run_id(run_id)
        body = {"reason": reason} if reason else None
        try:
            self._request("POST", f"/v1/runs/{run_id}/cancel", run_id=run_id, json_body=body)
        except Exception as exc:
            if getattr(exc, "problem", {}).get("code") == "run_ended":
                return False
            raise
        return True

    def events(
        self, run_id: str, *, follow: bool = False, after: int = 0, timeout: float | None = None
    ) -> Iterator[Event]:
        """The run's events after ``after`` (NDJSON); with ``follow``, as Server-Sent Events
        until the run ends (or ``timeout`` seconds pass without one), reconnecting after a
        dropped connection from the last event seen."""
        validate_run_id(run_id)
        if not follow:
            yield from self._logged(run_id, after)
            return
        yield from self._followed(run_id, after, timeout, deadline=None)

    def _logged(self, run_id: str, after: int) -> Iterator[Event]:
        headers = {"Accept": "application/x-ndjson", "Last-Event-ID": str(after)}
        answer = self._request("GET", f"/v1/runs/{run_id}/events", run_id=run_id, headers=headers)
        for line in answer.text.splitlines():
            if line.strip():
                yield Event.model_validate(json.loads(line))

    def _followed(
        self, run_id: str, after: int, quiet_s: float | None, *, deadline: float | None
    ) -> Iterator[Event]:
        """SSE from ``after`` until the end event, ``quiet_s`` without an event, or the
        monotonic ``deadline``; a dropped or stalled connection is made again (up to
        :data:`_RECONNECTS` times in a row without an event)."""
        last, failures = after, 0
        last_event_at = time.monotonic()
        path = f"/v1/runs/{run_id}/events"
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            read_s = _STALL_S if left is None else max(0.05, min(_STALL_S, left))
            if quiet_s is not None:
                read_s = max(0.05, min(read_s, quiet_s))
            timeout = httpx.Timeout(self._timeout, read=read_s)
            headers = {"Accept": "text/event-stream", "Last-Event-ID": str(last)}
            try:
                with self._http.stream("GET", path, headers=headers, timeout=timeout) as stream:
                    if stream.status_code >= 400:
                        stream.read()
                        raise error_of(
                            stream.status_code,
                            problem_of(stream.text),
                            what=f"GET {path}",
                            run_id=run_id,
                            retry_after=stream.headers.get("retry-after"),
                        )
                    got = 0
                    for message in sse_messages(stream.iter_lines()):
                        now = time.monotonic()
                        if message is None:  # a keep-alive
                            if quiet_s is not None and now - last_event_at >= quiet_s:
                                return
                            continue
                        event = Event.model_validate(json.loads(message.data))
                        last, failures, last_event_at = event.sequence, 0, now
                        got += 1
                        yield event
                        if event.type in RUN_END_EVENT_TYPES:
                            return
                    if got == 0:
                        return  # closed at once: the run had ended at or before ``last``
            except httpx.TimeoutException:
                pass  # quiet, or a stalled connection: looked at below, then reconnected
            except httpx.TransportError as exc:
                failures += 1
                if failures > _RECONNECTS:
                    raise StorageUnavailableError(
                        f"GET {self.url}{path}: the stream dropped {failures} times in a row: "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
                time.sleep(min(0.1 * 2**failures, 2.0))
            if quiet_s is not None and time.monotonic() - last_event_at >= quiet_s:
                return

    def state(self, run_id: str) -> RunState:
        """The run's folded state now, from its events (:class:`RunNotFoundError` for an
        unknown run)."""
        validate_run_id(run_id)
        builder = RunStateBuilder(run_id, pricing_fallback=self.pricing_fallback)
        builder.apply_all(self._logged(run_id, 0))
        return builder.snapshot()

    def wait(self, run_id: str, timeout: float | None = None) -> RunState:
        """Follow the run's events (SSE) until it ends, folding them as they come; its
        final state. :class:`WaitTimeoutError` after ``timeout`` seconds (``None``: no
        limit)."""
        validate_run_id(run_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        builder = RunStateBuilder(run_id, pricing_fallback=self.pricing_fallback)
        batch: list[Event] = []
        ended = False
        for event in self._followed(run_id, 0, None, deadline=deadline):
            batch.append(event)
            if len(batch) >= _FOLD_BATCH:
                builder.apply_all(batch)
                batch = []
            ended = event.type in RUN_END_EVENT_TYPES
        builder.apply_all(batch)
        state = builder.snapshot()
        if not ended:
            raise WaitTimeoutError(
                f"run {run_id} did not finish within {timeout:g}s (status {state.status})"
            )
        return state


def _workflow_id(workflow: Any) -> str:
    if isinstance(workflow, str):
        return workflow
    from little_dist.authoring import WorkflowDefinition

    if isinstance(workflow, WorkflowDefinition):
        return workflow.id
    raise InvalidInputError(
        "Client(url).submit: the HTTP API takes the id of a workflow the server's app "
        f"defines (a str or a WorkflowDefinition), got {type(workflow).__name__}"
    )


def _deadline(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dt.timedelta):
        value = dt.datetime.now(dt.UTC) + value
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise InvalidInputError(
                f"Client(url).submit: deadline {value.isoformat()} has no time zone; give one"
            )
        return value.isoformat()
    raise InvalidInputError(
        "Client(url).submit: deadline must be a datetime, a timedelta or a string such as "
        f"'10m', got {type(value).__name__}"
    )
