"""The embedded default runner: one process, a thread pool, any world.

:func:`run_version` drives one run of a compiled :class:`WorkflowVersion` to its end:

* the run input is checked against the workflow's input schema before anything is written;
* the version is registered and ``WorkflowVersionRegistered`` + ``RunStarted`` appended
  (occurrence ids ``version-registered`` and ``run-start``: idempotent);
* then the loop: fold the new events into a :class:`~little_dist.run_state.RunStateBuilder`
  (incrementally; outputs stored by reference are read back in), ask
  :func:`~little_dist.scheduling.decide` what next, append its events in one batch, and
  run each new dispatch (:func:`~little_dist.runtime.execute_step_attempt`): a lone one on
  the loop's own thread, several on a thread pool; wait for one to finish; repeat until
  ``decide`` says the run is done. Nothing but ``decide`` chooses what runs. When a
  decision schedules only the lone attempt the loop runs next (a chain's next step: its
  :attr:`~little_dist.scheduling.Decision.rider`), its events are not appended on their own
  but with that attempt's first append, fenced by its step lease: one write a step less.

The loop runs on a thread of its own; the calling thread gets progress and notices from it
and watches a lone attempt (no thread hand-off per step): it reads the log for a cancel
request while the attempt runs, and when the attempt's call outlives its step timeout (or a
cancel ends the run first), another thread goes on with the loop and the stuck one is left
behind (a daemon: it never keeps the process alive).

A ``little.run.cancel_requested`` in the log (``little cancel``; a sub-run whose parent was
stopped, see :mod:`little_dist.subruns`) makes ``decide`` fail the run with causeCode
``cancelled``; attempts in flight are told to stop and waited for (a model call in flight is
not: see :mod:`little_dist.harness.model_calls`). The caller's ``cancel`` handle records that
request when it is set, and a run whose deadline (``little.run.limits``, see
:mod:`little_dist.run_limits`) passes records it with the deadline's cause. Both are looked
at every ``CANCEL_POLL`` seconds at most. An interrupt of the calling thread (Ctrl-C) only
stops this process driving the run: the run stays open, and calling again with its id
resumes it.

Calling it again with the id of a finished run returns the recorded state and runs nothing.
With the id of an unfinished run it resumes: attempts left *running* by a dead process are
failed with causeCode ``lease_expired`` once their step lease is free
(:func:`~little_dist.runtime.sweep_dead_attempts`, at start and then periodically while
some are still leased) and ``decide`` retries them; the harness memo replays the tool calls
and model turns they had finished, so resuming repeats no recorded side effect.

One runner per run: the runner holds the lease ``{run}:runner`` (heartbeated) and fences
its own appends with it (a decision riding with an attempt's first append is fenced by that
attempt's step lease instead: only the loop holding the runner lease decides); a second
runner waits up to ``lock_wait`` seconds for it (a killed runner's lease expires after
``lease_ttl``) and then gives up with :class:`RunnerBusyError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from little_dist.compiler import WorkflowVersion
from little_dist.errors import InvalidInputError
from little_dist.events import Event
from little_dist.ids import validate_run_id
from little_dist.local_runner.checks import (
    RunInputError,
    RunMismatchError,
    RunnerBusyError,
    RunStalledError,
    _check_same_run,
    check_run_input,
    new_run_id,
)
from little_dist.local_runner.runner import (
    DEFAULT_LEASE_TTL,
    NoticeCallback,
    ProgressCallback,
    _Runner,
)
from little_dist.pricing import PriceFallback
from little_dist.run_state import RUN_ENDED, RunState, RunStateBuilder
from little_dist.runtime import Capabilities, hydrate_events
from little_dist.world.base import World

__all__ = [
    "DEFAULT_LEASE_TTL",
    "RunInputError",
    "RunMismatchError",
    "RunStalledError",
    "RunnerBusyError",
    "check_run_input",
    "new_run_id",
    "run_version",
]


def run_version(
    world: World,
    version: WorkflowVersion,
    run_input: Any,
    *,
    run_id: str | None = None,
    capabilities: Capabilities | None = None,
    max_workers: int = 8,
    progress: ProgressCallback | None = None,
    notice: NoticeCallback | None = None,
    lease_ttl: float = DEFAULT_LEASE_TTL,
    lock_wait: float | None = None,
    max_branches_cap: int | None = None,
    pricing_fallback: PriceFallback | None = None,
    parent: Mapping[str, Any] | None = None,
    archive: bool = True,
    cancel: Any = None,
) -> RunState:
    """Run (or resume, or just read back) one run of ``version``; return its final state.

    ``progress`` is called on the calling thread with each new state; ``notice`` with
    one-line messages (waiting for a previous runner's lease, ...). ``lock_wait`` (default
    ``lease_ttl`` + 2 s) bounds the wait for another runner's lease. Raises
    :class:`RunInputError` / :class:`RunMismatchError` before writing anything,
    :class:`RunnerBusyError` when the run stays held, :class:`RunStalledError` when
    ``decide`` cannot make progress. ``pricing_fallback`` prices the state's model calls the
    bundled registry has no rates for (``None``: registry rates only). ``parent``: the link
    of a sub-run to the run that started it (``parentRunId``, ... see
    :mod:`little_dist.subruns`), recorded in its ``RunStarted``. ``archive=False`` leaves a
    finished run's log where it is (an outer loop records its cycle's decision on it first,
    then archives it). ``cancel``: a cancel handle (anything with ``is_set()``, see
    :class:`~little_dist.run_limits.CancelToken`): once set, the run is cancelled.
    """
    if max_workers < 1:
        raise InvalidInputError(f"max_workers must be at least 1, got {max_workers!r}")
    check_run_input(version, run_input)
    run_id = new_run_id() if run_id is None else validate_run_id(run_id)
    existing = world.list_events(run_id)
    if existing:
        state = _fold(world, run_id, existing, pricing_fallback)
        _check_same_run(run_id, state, existing, version, run_input)
        if state.status in RUN_ENDED:
            if progress is not None:
                progress(state)
            return state
    runner = _Runner(
        world,
        version,
        run_input,
        run_id=run_id,
        capabilities=capabilities or Capabilities(),
        max_workers=max_workers,
        progress=progress,
        notice=notice,
        lease_ttl=lease_ttl,
        max_branches_cap=max_branches_cap,
        pricing_fallback=pricing_fallback,
        parent=parent,
        archive=archive,
        cancel_handle=cancel,
    )
    return runner.run(lock_wait=lease_ttl + 2.0 if lock_wait is None else lock_wait)


def _fold(
    world: World, run_id: str, events: Iterable[Event], pricing_fallback: PriceFallback | None
) -> RunState:
    builder = RunStateBuilder(run_id, pricing_fallback=pricing_fallback)
    builder.apply_all(hydrate_events(world, events))
    return builder.snapshot()
