"""``Client``: submit runs to the fleet, read their status, wait for them, cancel them.

Submitting is :func:`~little_dist.fleet.submission.submit_run` (see there: what is written,
where the version comes from, idempotence on the run id).
:meth:`Client.wait` follows the run's event log (``world.follow``) until ``RunCompleted`` or
``RunFailed``; no result backend is involved.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final

from little_dist import occurrences
from little_dist.compiler import WorkflowVersion
from little_dist.errors import InvalidInputError, LittleError, RunEndedError
from little_dist.event_types.engine import CANCEL_EVENT_TYPE
from little_dist.events import RUN_END_EVENT_TYPES, Event, EventInput
from little_dist.fleet.approval_calls import FleetApprovals
from little_dist.fleet.dispatch import advance_run
from little_dist.fleet.run_report import read_run_report, run_report_json
from little_dist.fleet.run_status import RunStatusView
from little_dist.fleet.run_tracker import RunTracker
from little_dist.fleet.run_waits import waiting_for_approval
from little_dist.fleet.shared_redis import SharedRedis, shared_redis
from little_dist.fleet.submission import submit_run, submit_runs
from little_dist.ids import validate_run_id
from little_dist.litellm_prices import litellm_price_fallback
from little_dist.local_runner import RunMismatchError
from little_dist.observability.hooks import submitted
from little_dist.observability.metrics import enable_metrics
from little_dist.pricing import PriceFallback
from little_dist.run_limits import RunLimits
from little_dist.run_state import (
    FOLDED_EVENT_TYPES,
    RUN_ENDED,
    EventLike,
    RunState,
    RunStateBuilder,
)
from little_dist.runtime import hydrate_events
from little_dist.settings import Settings, load_settings
from little_dist.world.base import RunNotFoundError, UndecodedEvent, World
from little_dist.world.fleet_keys import active_runs_key

if TYPE_CHECKING:
    from celery import Celery

    from little_dist.authoring import WorkflowDefinition
    from little_dist.fleet.app_registry import AppRegistry
    from little_dist.fleet.queue import TaskQueue
    from little_dist.fleet.worker_slots import FanoutWindow

__all__ = [
    "Client",
    "RunMismatchError",
    "RunStatusView",
    "WaitTimeoutError",
    "submit_run",
]

TERMINAL_TYPES: Final = RUN_END_EVENT_TYPES
# Events Client.wait folds at a time while it follows a run.
_WAIT_FOLD_BATCH: Final = 256
# The longest Client.wait lets a quiet run's follow block before it looks at its deadline.
_WAIT_SLICE_S: Final = 1.0
_UNCOMPILED: Final = "uncompiled"


class WaitTimeoutError(LittleError):
    """:meth:`Client.wait` gave up before the run ended."""

    retryable = True


# -- submission ---------------------------------------------------------------------------


class Client(FleetApprovals):
    """The fleet from a program: ``submit``, ``status``, ``report``, ``wait``, ``events``,
    ``cancel``, and the approvals runs wait for (``approvals``, ``approve``, ``reject``:
    :mod:`~little_dist.fleet.approval_calls`).

    ``settings`` default to :func:`~little_dist.settings.load_settings` (the environment);
    ``world`` to :func:`~little_dist.world.factory.world_from_settings`; ``app`` (the Celery app
    tasks are sent with) to :func:`~little_dist.fleet.app.make_celery_app`; ``queue`` (a
    :class:`~little_dist.fleet.queue.TaskQueue`, e.g. a ``MemoryQueue`` in tests) replaces
    the app; ``registry`` (the workflows submissions are checked against) to the app module
    of ``settings.app`` (``LITTLE_APP``), when it names one, loaded at the first submission.
    ``pricing_fallback`` prices the model calls the bundled registry has no rates for in
    the states and costs it reports (default: litellm's cost map; ``None``: registry only).
    What the client opens itself it closes in :meth:`close` (also a context manager).

    ``Client("https://host:8080", token=...)`` (an ``http://`` or ``https://`` URL of
    ``little serve``) is a client of the HTTP API instead: the same methods over HTTP only,
    no Redis, S3 or Celery (:class:`~little_dist.fleet.http_client.HttpClient`).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Client:
        target = args[0] if args else kwargs.get("settings", kwargs.get("url"))
        if cls is Client and _is_http(target):
            from little_dist.fleet.http_client import HttpClient

            return super().__new__(HttpClient)
        return super().__new__(cls)

    def __init__(
        self,
        settings: Settings | str | None = None,
        *,
        token: str | None = None,
        world: World | None = None,
        app: Celery | None = None,
        registry: AppRegistry | None = None,
        queue: TaskQueue | None = None,
        pricing_fallback: PriceFallback | None = litellm_price_fallback,
    ) -> None:
        if isinstance(settings, str) or token is not None:
            raise InvalidInputError(
                f"Client({settings!r}): a URL must be http:// or https:// (little serve's), "
                "and token= goes with one"
                if isinstance(settings, str)
                else "Client(token=...): a token is for an http(s):// URL of little serve"
            )
        self.settings = settings if settings is not None else load_settings()
        if self.settings.metrics_port is not None:  # (this process's /metrics, once)
            enable_metrics("client", port=self.settings.metrics_port)
        self.pricing_fallback = pricing_fallback
        self._world = world
        self._owns_world = world is None
        self._app = app
        self._owns_app = app is None
        self._queue = queue
        self.registry = registry
        self._holder = f"client:{socket.gethostname()}:{os.getpid()}"
        self._window: FanoutWindow | None = None
        self._window_open = False
        self._fleet_redis: Any = None
        self._shared: SharedRedis | None = None
        self._shared_known = False
        self._looks: ThreadPoolExecutor | None = None

    # -- wiring ------------------------------------------------------------------------------

    @property
    def world(self) -> World:
        if self._world is None:
            from little_dist.world.factory import world_from_settings

            self._world = world_from_settings(self.settings)
        return self._world

    @property
    def app(self) -> Celery:
        if self._app is None:
            from little_dist.fleet.app import make_celery_app

            self._app = make_celery_app(self.settings)
        return self._app

    @property
    def queue(self) -> TaskQueue:
        """Where this client's tasks go: the given queue, else the Celery app's queues."""
        if self._queue is None:
            from little_dist.fleet.queue import CeleryQueue

            self._queue = CeleryQueue(self.app, self.settings)
        return self._queue

    def _open_fleet_redis(self) -> None:
        """The fleet's Redis (signal stream, slots, active runs), opened once: ``None`` when
        the settings name no fleet world on Redis (a client on a world of its own)."""
        if self._window_open:
            return
        from little_dist.fleet.worker_slots import fanout_window, fleet_redis

        self._window_open = True
        try:
            self._fleet_redis = fleet_redis(self.settings)
        except InvalidInputError:
            self._fleet_redis = None
        if self._fleet_redis is not None:
            self._window = fanout_window(self.settings, client=self._fleet_redis)

    @property
    def window(self) -> FanoutWindow | None:
        """The fleet's cap on a fan-out's branches in flight, for the decisions this client
        makes (``None`` with ``LITTLE_BRANCH_WINDOW=declared`` or no fleet Redis)."""
        self._open_fleet_redis()
        return self._window

    def _announce(self) -> Callable[[str], None] | None:
        """Adds a run to the scheduler's active runs (see :func:`submit_run`)."""
        from little_dist.world.redis_s3 import RedisS3World

        self._open_fleet_redis()
        # Only a world on the fleet's Redis is one the scheduler sweeps.
        if self._fleet_redis is None or not isinstance(self.world, RedisS3World):
            return None
        from little_dist.fleet.sweeper import ActiveRuns

        return ActiveRuns(self._fleet_redis, active_runs_key(self.settings.signal_stream)).add

    def _at_once(self) -> SharedRedis | None:
        """The fleet, when its world, its scheduler's Redis and its broker are one Redis
        server and database and tasks go through Celery: then a submit starts a run and
        sends its first tasks in one round trip (see
        :mod:`~little_dist.fleet.submission`). ``None`` elsewhere (a broker on another
        Redis or not on Redis, a world of its own, a queue given to the client): submits
        go the step-by-step way. Found out once."""
        if self._shared_known:
            return self._shared
        self._shared_known = True
        looks = ThreadPoolExecutor(max_workers=2, thread_name_prefix="little-look")
        self._shared = shared_redis(self.world, self.queue, self.settings, looks)
        if self._shared is None:
            looks.shutdown()
        else:
            self._looks = looks
        return self._shared

    def close(self) -> None:
        """Close what the client opened (the world and the Celery app it built)."""
        self._shared, self._shared_known = None, False
        if self._looks is not None:
            self._looks.shutdown(wait=True)
            self._looks = None
        self._window = None
        if self._fleet_redis is not None:
            self._fleet_redis.close()
            self._fleet_redis = None
        if self._owns_world and self._world is not None:
            self._world.close()
            self._world = None
        if self._owns_app and self._app is not None:
            self._app.close()
            self._app = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs ----------------------------------------------------------------------------------

    def _load_registry(self) -> None:
        """The app module's registry (``settings.app``), loaded at the first submission."""
        if self.registry is None and self.settings.app:
            from little_dist.fleet.app_registry import load_registry

            self.registry = load_registry(self.settings.app)

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
        callback_url: str | None = None,
    ) -> str:
        """Submit a run; its id. Idempotent on ``run_id`` (see the module docstring).
        ``cycle``: the run is an outer-loop cycle, planned by the fleet's planner with the
        cycle's context (see :func:`~little_dist.fleet.submission.submit_run`).
        ``budget_usd``: the run's dollar ceiling (default: a definition's own; see
        :mod:`little_dist.budgets`). ``deadline``: when the run must end at the latest (a
        timezone-aware ``datetime``, a ``timedelta`` or ``'10m'`` from now, an ISO 8601
        time): past it the run fails with causeCode ``deadline_exceeded``, its attempts in
        flight interrupted, whether or not a worker is running its steps. ``timeout`` and
        ``max_attempts``: upstream's run-level options (default: a definition's own); see
        :mod:`little_dist.run_limits`. ``callback_url``: an http(s) URL the scheduler POSTs
        the run's end to, signed (see :mod:`little_dist.fleet.callbacks`)."""
        self._load_registry()
        submitted(1)
        return submit_run(
            self.world,
            workflow,
            input,
            run_id=run_id,
            cycle=cycle,
            queue=self.queue,
            settings=self.settings,
            registry=self.registry,
            holder=self._holder,
            window=self.window,
            announce=self._announce(),
            shared=self._at_once(),
            budget_usd=budget_usd,
            limits=_limits(timeout, deadline, max_attempts),
            callback_url=callback_url,
        )

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
        """Submit one run per input (``run_ids``: their ids, else new ones); their ids, in
        order. For batches: every input is checked first, then the starts go a few dozen
        to a round trip, printed from per-workflow templates, and the scheduler makes each
        run's first decision (its start signals it). Idempotent per run id as
        :meth:`submit` (see :func:`~little_dist.fleet.submission.submit_runs`).
        ``budget_usd``: each run's dollar ceiling; ``deadline``, ``timeout``,
        ``max_attempts``, ``callback_url``: each run's, as :meth:`submit` takes them."""
        self._load_registry()
        submitted(len(inputs))
        return submit_runs(
            self.world,
            workflow,
            inputs,
            run_ids=run_ids,
            budget_usd=budget_usd,
            limits=_limits(timeout, deadline, max_attempts),
            settings=self.settings,
            registry=self.registry,
            callback_url=callback_url,
        )

    def _require(self, run_id: str) -> list[Event]:
        validate_run_id(run_id)
        events = self.world.list_events(run_id)
        if not events:
            raise RunNotFoundError(run_id)
        return events

    def _fold(self, run_id: str, events: list[Event]) -> RunState:
        builder = RunStateBuilder(run_id, pricing_fallback=self.pricing_fallback)
        builder.apply_all(hydrate_events(self.world, events))
        return builder.snapshot()

    def state(self, run_id: str) -> RunState:
        """The run's folded state now (:class:`RunNotFoundError` for an unknown run)."""
        return self._fold(run_id, self._require(run_id))

    def status(self, run_id: str) -> RunStatusView:
        """The run at a glance (:class:`RunNotFoundError` for an unknown run)."""
        events = self._require(run_id)
        state = self._fold(run_id, events)
        types = {event.type for event in events}
        ended = state.status in RUN_ENDED
        return RunStatusView.of(
            state,
            cancel_requested=CANCEL_EVENT_TYPE in types,
            planning="RunStarted" not in types and not ended,
            # Only an ended run can have one (an attempt refused after the end).
            late=self.world.late_events(run_id) if ended else (),
            pricing_fallback=self.pricing_fallback,
            limits=RunLimits.of_events(events),
            waiting=() if ended else waiting_for_approval(run_id, events),
        )

    def report(self, run_id: str) -> dict[str, Any]:
        """The run's report as ``little report --json`` prints it: attempts, tokens, dollars
        and duration per step, its budget and its sub-runs (:class:`RunNotFoundError` for an
        unknown run; see :mod:`~little_dist.fleet.run_report`)."""
        validate_run_id(run_id)
        parts = read_run_report(self.world, run_id, pricing_fallback=self.pricing_fallback)
        return run_report_json(parts)

    def events(
        self, run_id: str, *, follow: bool = False, after: int = 0, timeout: float | None = None
    ) -> Iterator[Event]:
        """The run's events after ``after``; with ``follow``, new ones as they arrive until
        the run ends (or ``timeout`` seconds pass without one)."""
        validate_run_id(run_id)
        if not follow:
            yield from self.world.list_events(run_id, after=after)
            return
        for event in self.world.follow(run_id, after=after, timeout=timeout):
            yield event
            if event.type in TERMINAL_TYPES:
                return

    def wait(self, run_id: str, timeout: float | None = None) -> RunState:
        """Block until the run completes or fails; its final state.

        Follows the run's log (:meth:`World.follow`, which reads a busy run's events a
        batch at a time) and folds them as they come, so the end of a wide run does not
        wait for its thousands of events to be read and folded after the fact. Raises
        :class:`WaitTimeoutError` after ``timeout`` seconds (``None``: no limit).
        """
        validate_run_id(run_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        builder = RunStateBuilder(run_id, pricing_fallback=self.pricing_fallback)
        batch: list[EventLike] = []
        ended = False
        last = 0
        while not ended:
            # follow's timeout counts from the last event it saw: it is given at most a
            # slice of what is left, so a run that goes quiet cannot keep us past ours.
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            quiet = _WAIT_SLICE_S if left is None else min(left, _WAIT_SLICE_S)
            # Payloads the fold does not read (harness traces) are not even parsed.
            for event in self.world.follow_partly(
                run_id, after=last, timeout=quiet, decode=FOLDED_EVENT_TYPES
            ):
                batch.append(event.envelope() if isinstance(event, UndecodedEvent) else event)
                last = event.sequence
                if event.type in TERMINAL_TYPES:
                    ended = True
                    break
                if len(batch) >= _WAIT_FOLD_BATCH:
                    builder.apply_all(hydrate_events(self.world, batch))
                    batch = []
                if deadline is not None and time.monotonic() >= deadline:
                    break
        builder.apply_all(hydrate_events(self.world, batch))
        state = builder.snapshot()
        if not ended:
            raise WaitTimeoutError(
                f"run {run_id} did not finish within {timeout:g}s (status {state.status})"
            )
        return state

    def cancel(self, run_id: str, reason: str | None = None) -> bool:
        """Ask the run to stop; ``False`` if it had already ended.

        Appends ``little.run.cancel_requested`` (occurrence ``cancel``); ``decide`` then
        records ``RunFailed`` with causeCode ``cancelled`` (done here at once when possible,
        else by the scheduler or the next worker commit). Nothing new starts; a step already
        running is told to stop when the run's end is announced (its model call in flight
        abandoned, its sandboxed command killed: :mod:`~little_dist.fleet.end_watch`), and
        the run's end seals its log, so nothing the step records after it is taken (its
        model usage goes to the run's late record).
        """
        events = self._require(run_id)
        if any(event.type in TERMINAL_TYPES for event in events):
            return False
        payload: dict[str, Any] = {"requestedBy": self._holder}
        if reason:
            payload["reason"] = reason
        try:
            self.world.append(
                run_id,
                EventInput(
                    type=CANCEL_EVENT_TYPE, occurrence_id=occurrences.CANCEL, payload=payload
                ),
            )
        except RunEndedError:
            return False  # it ended since we read it
        if not any(event.type == "RunStarted" for event in events):
            # Still planning: no RunContext for decide yet, so end the run here. A planner
            # that races us finds run-start/run-end recorded and adds nothing.
            self.world.append_batch(
                run_id,
                [
                    EventInput(
                        type="RunStarted",
                        occurrence_id=occurrences.RUN_START,
                        payload={"workflowVersionId": _UNCOMPILED},
                    ),
                    EventInput(
                        type="RunFailed",
                        occurrence_id=occurrences.RUN_END,
                        payload={
                            "workflowVersionId": _UNCOMPILED,
                            "error": _cancelled_error(reason),
                        },
                    ),
                ],
            )
            return True
        tracker = RunTracker(self.world, run_id, max_branches_cap=self.settings.max_branches_cap)
        advance_run(self.world, self.queue, self.settings, tracker, holder=self._holder)
        return True


def _is_http(target: object) -> bool:
    return isinstance(target, str) and target.lower().startswith(("http://", "https://"))


def _limits(timeout: Any, deadline: Any, max_attempts: Any) -> dict[str, Any]:
    given = {"timeout": timeout, "deadline": deadline, "max_attempts": max_attempts}
    return {name: value for name, value in given.items() if value is not None}


def _cancelled_error(reason: str | None) -> dict[str, Any]:
    # The shape decide() records for a cancelled run.
    del reason  # kept on the cancel_requested event
    return {"name": "AbortError", "message": "Run was cancelled.", "causeCode": "cancelled"}
