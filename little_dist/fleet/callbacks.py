"""A run's callback: the signed POST its submitter asked for (``callback_url``) when it ends.

Who sends it: the scheduler that finishes the run (:class:`~little_dist.fleet.archiving.Archiver`
calls :meth:`Callbacks.start` as it remembers the run, and archives the run only once the
delivery's outcome is recorded: an archived log takes no more events). The run's log says
where to send it (``little.run.callback``, recorded with its start) and what was tried
(``little.callback.attempted`` per attempt, then ``little.callback.delivered`` or
``little.callback.abandoned``: :data:`~little_dist.event_types.engine.CALLBACK_EVENT_TYPES`,
events a run takes after its end).

Once per run end, however many schedulers finish it: the sender holds the lease
``{<run id>}:callback`` (the world's leases, with a fencing token) and records every attempt
fenced by it. A scheduler that finds the lease held waits and looks at the log again: once
the outcome is there it is done; if the holder died, its lease expires and this one takes
over, counting on from the attempts the log holds (a POST in flight when the holder died may
be repeated: the ``webhook-id`` header is the same on every attempt, so the receiver can
drop a repeat). A receiver that fails (refused connection, timeout, an answer other than
2xx; redirects are not followed) is tried again after ``callback_backoff``, doubling up to
60 s, until ``callback_retry_for`` after the run's end, then the callback is abandoned.

What is recorded names the attempt's number, the answer's status or the error's kind and
the wait before the next one: never the secret, the signature or the receiver's answer body.
Without ``LITTLE_CALLBACK_SECRET`` nothing is sent; the callback is recorded as abandoned.

The body (JSON): ``{"type": "run.ended", "runId", "status", "endedAt", "output"?,
"error"?, "failure"?}`` (``failure``: why it failed, as ``little status`` says).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final
from urllib.parse import urlsplit

from little_dist import occurrences
from little_dist.errors import LeaseLostError, LittleError
from little_dist.event_types.engine import (
    CALLBACK_ABANDONED,
    CALLBACK_ATTEMPTED,
    CALLBACK_DELIVERED,
    CALLBACK_EVENT_TYPE,
)
from little_dist.events import RUN_END_EVENT_TYPES, Event, EventInput
from little_dist.fleet.run_status import RunStatusView
from little_dist.fleet.scheduler_log import log_event as _log
from little_dist.fleet.webhook_signing import sign
from little_dist.run_state import materialize_run_state
from little_dist.settings import Settings
from little_dist.world.base import Lease, World
from little_dist.world.fleet_keys import run_lease_key

__all__ = [
    "MAX_BACKOFF_S",
    "UNKNOWN",
    "Answer",
    "Callbacks",
    "Unknown",
    "callback_event",
    "post_once",
]

#: The longest wait between two attempts (seconds).
MAX_BACKOFF_S: Final = 60.0
#: The callback event is recorded with the run's start: among its first events.
_HEAD: Final = 64


class Unknown:
    """Whether a run has a callback is not known yet: its log's head says."""

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Final = Unknown()


def callback_event(url: str) -> EventInput:
    """The ``little.run.callback`` event a run's start records (``url`` checked already:
    :func:`~little_dist.fleet.callback_urls.check_callback_url`)."""
    return EventInput(
        type=CALLBACK_EVENT_TYPE, occurrence_id=occurrences.CALLBACK, payload={"url": url}
    )


@dataclass(frozen=True)
class Answer:
    """What one attempt got: the receiver's status, or why there was none."""

    status: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


Post = Callable[[str, bytes, dict[str, str], float], Answer]


def post_once(url: str, body: bytes, headers: dict[str, str], timeout: float) -> Answer:
    """POST ``body`` to ``url`` once; no redirect is followed (a 3xx is a failed attempt).
    The error names its kind only: a receiver's text stays out of the run's log."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        connection = http.client.HTTPSConnection(
            host, parts.port, timeout=timeout, context=ssl.create_default_context()
        )
    else:
        connection = http.client.HTTPConnection(host, parts.port, timeout=timeout)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request(
            "POST",
            path,
            body=body,
            headers={
                **headers,
                "content-type": "application/json",
                "user-agent": "little-dist-callback",
            },
        )
        response = connection.getresponse()
        response.read(64 * 1024)
        return Answer(status=response.status)
    except TimeoutError:
        return Answer(error="timeout")
    except ConnectionRefusedError:
        return Answer(error="connection refused")
    except ssl.SSLError as error:
        return Answer(error=f"tls: {error.reason or type(error).__name__}")
    except OSError as error:
        return Answer(error=f"network: {type(error).__name__}")
    except http.client.HTTPException as error:
        return Answer(error=f"http: {type(error).__name__}")
    finally:
        connection.close()


class Callbacks:
    """The callbacks one scheduler sends (see the module docstring). :meth:`start` gives a
    future that is ``True`` once the run may be archived (nothing to send, or the outcome
    recorded), ``False`` when this process stopped first (the run stays unarchived: the
    next sweep, here or elsewhere, takes the callback over)."""

    def __init__(
        self,
        world: World,
        settings: Settings,
        holder: str,
        *,
        post: Post = post_once,
        threads: int = 8,
    ) -> None:
        self._world = world
        self._settings = settings
        self._holder = holder
        self._post = post
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="little-callback")
        cap = min(MAX_BACKOFF_S, settings.callback_retry_for)
        #: Long enough for the longest wait plus an attempt: a live holder keeps it.
        self.lease_ttl = cap + settings.callback_timeout + 10.0

    def start(self, run_id: str, url: str | Unknown = UNKNOWN) -> Future[bool]:
        """Send ``run_id``'s callback in the background: to ``url``, or (:data:`UNKNOWN`:
        the caller has not read the run's first events) to the one its log names, if any."""
        try:
            return self._pool.submit(self._guarded, run_id, url)
        except RuntimeError:  # (closed)
            done: Future[bool] = Future()
            done.set_result(False)
            return done

    def close(self) -> None:
        """Stop waiting between attempts and wait for attempts in flight."""
        self._stop.set()
        self._pool.shutdown(wait=True)

    # -- one run ------------------------------------------------------------------------------

    def _guarded(self, run_id: str, url: str | Unknown) -> bool:
        try:
            return self._deliver(run_id, url)
        except Exception as exc:  # storage away, or a bug: the next finish tries again
            _log("callback-error", level=logging.WARNING, exc_info=exc, run=run_id, error=str(exc))
            return False

    def _deliver(self, run_id: str, known: str | Unknown) -> bool:
        url: object = known
        if isinstance(known, Unknown):
            head = self._world.list_events(run_id, limit=_HEAD)
            url = next((e.payload.get("url") for e in head if e.type == CALLBACK_EVENT_TYPE), None)
        if not isinstance(url, str):
            return True
        key = run_lease_key(run_id, "callback")  # (in the run's slot: appends are fenced by it)
        while True:
            events = self._world.list_events(run_id)
            if _outcome(events):
                return True
            lease = self._world.acquire_lease(key, self._holder, self.lease_ttl)
            if lease is not None:
                break
            # Another scheduler sends it: look again later, take over if it died.
            if self._stop.wait(min(5.0, self.lease_ttl / 3)):
                return False
        try:
            return self._attempts(run_id, url, events, lease)
        except LeaseLostError as exc:
            _log("callback-lost", run=run_id, error=str(exc))
            return False
        finally:
            with contextlib.suppress(LittleError):  # (else it expires on its own)
                self._world.release_lease(lease)

    def _attempts(self, run_id: str, url: str, events: list[Event], lease: Lease) -> bool:
        end = next((e for e in reversed(events) if e.type in RUN_END_EVENT_TYPES), None)
        if end is None:
            return False  # (not over: nothing to tell yet)
        state = materialize_run_state(events, run_id=run_id)
        view = RunStatusView.of(state, cancel_requested=False, planning=False)
        body = _body(view, end)
        webhook_id = f"msg_{run_id}_{end.sequence}"
        ended = _epoch(end.recorded_at)
        give_up_at = ended + self._settings.callback_retry_for
        done = sum(1 for e in events if e.type == CALLBACK_ATTEMPTED)
        secret = self._settings.callback_secret
        if secret is None:
            self._record(
                run_id,
                lease,
                [
                    _outcome_event(
                        CALLBACK_ABANDONED,
                        done,
                        webhook_id,
                        error="no secret set (LITTLE_CALLBACK_SECRET)",
                    )
                ],
            )
            _log("callback-abandoned", run=run_id, attempts=done, error="no secret")
            return True
        while True:
            attempt = done + 1
            now = time.time()
            headers = sign(secret.get_secret_value(), webhook_id, int(now), body)
            answer = self._post(url, body, headers, self._settings.callback_timeout)
            lease = self._world.renew_lease(lease, self.lease_ttl)
            tried: dict[str, Any] = {"attempt": attempt, "webhookId": webhook_id, "at": _iso(now)}
            if answer.status is not None:
                tried["statusCode"] = answer.status
            if answer.error is not None:
                tried["error"] = answer.error
            if answer.ok:
                delivered = _outcome_event(
                    CALLBACK_DELIVERED, attempt, webhook_id, statusCode=answer.status
                )
                self._record(run_id, lease, [_attempt_event(tried), delivered])
                _log("callback-delivered", run=run_id, attempts=attempt, status=answer.status)
                return True
            wait = min(MAX_BACKOFF_S, self._settings.callback_backoff * 2 ** (attempt - 1))
            failed = answer.error or f"answered {answer.status}"
            if time.time() + wait > give_up_at:
                abandoned = _outcome_event(CALLBACK_ABANDONED, attempt, webhook_id, error=failed)
                self._record(run_id, lease, [_attempt_event(tried), abandoned])
                _log("callback-abandoned", run=run_id, attempts=attempt, error=failed)
                return True
            tried["retryInMs"] = int(wait * 1000)
            self._record(run_id, lease, [_attempt_event(tried)])
            _log("callback-retry", run=run_id, attempt=attempt, error=failed, wait=wait)
            if self._stop.wait(wait):
                return False
            lease = self._world.renew_lease(lease, self.lease_ttl)
            done = attempt

    def _record(self, run_id: str, lease: Lease, events: list[EventInput]) -> None:
        self._world.append_batch(run_id, events, fence=lease.fence)


def _outcome(events: list[Event]) -> bool:
    return any(e.type in (CALLBACK_DELIVERED, CALLBACK_ABANDONED) for e in events)


def _attempt_event(payload: dict[str, Any]) -> EventInput:
    return EventInput(
        type=CALLBACK_ATTEMPTED,
        occurrence_id=occurrences.callback_attempt(payload["attempt"]),
        payload=payload,
    )


def _outcome_event(kind: str, attempts: int, webhook_id: str, **fields: Any) -> EventInput:
    return EventInput(
        type=kind,
        occurrence_id=occurrences.CALLBACK_OUTCOME,
        payload={"attempts": attempts, "webhookId": webhook_id, **fields},
    )


def _body(view: RunStatusView, end: Event) -> bytes:
    data: dict[str, Any] = {
        "type": "run.ended",
        "runId": view.run_id,
        "status": view.status,
        "endedAt": view.finished_at or end.recorded_at,
    }
    if view.has_output:
        data["output"] = view.output
    if view.error is not None:
        data["error"] = view.error
    if view.failure is not None:
        data["failure"] = view.failure.to_json()
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode("utf-8")


def _epoch(stamp: str) -> float:
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return time.time()


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{int(epoch % 1 * 1000):03d}Z"
