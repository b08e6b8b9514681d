"""What happens after a step attempt fails: retry, run the fixer, retry a crash, or give up.

The answer is a pure function of the step and its attempt history, replayed from the first
attempt each time, so the kind of every attempt (``execute_step`` or ``fix_step``) is known
without recording it anywhere:

- causeCode ``lease_expired`` (the worker died; written by a sweeper): the same kind of attempt
  runs again without using the step's budget, at most ``max_crash_retries`` times per path;
- a failed ``code.run`` attempt whose step declares ``onFailure.fixer`` gets a ``fix_step``
  attempt next (role ``fixer``) while fixer attempts remain, unless the cause is one upstream
  never fixes (``cancelled``, ``timeout``, ``capability_drift``, ``runtime_config_error``);
  a failed fix attempt ends the step, as upstream's fixer error does;
- otherwise a retriable error (``retriable`` not false, cause not terminal) is retried while
  worker attempts stay under ``retry.maxAttempts`` (or the run's default);
- anything else ends the step with its last error.

An attempt that ended ``suspended`` (it waits for sub-runs, ``little.step.suspended``) is
neither a failure nor a crash: the attempt after it, once its sub-runs have ended, runs as
the same kind, free of the step's budget and of the crash budget.

An attempt that failed with causeCode ``quota_wait`` gave its worker slot back rather than
wait for its provider quota (a fleet worker's model call, see :mod:`little_dist.quotas`):
the same kind of attempt runs again, free of the step's budget, at most
``MAX_QUOTA_WAITS`` times per path, and not before its error's ``retryAfterMs`` past its
end (:func:`not_before_ms`: the dispatch carries it, and the fleet sends the task then).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from little_dist.scheduling.step_graph import StepPlan
from little_dist.scheduling.types import DispatchKind

__all__ = [
    "CAUSE_LEASE_EXPIRED",
    "CAUSE_QUOTA_WAIT",
    "MAX_QUOTA_WAITS",
    "SUSPENDED",
    "TERMINAL_CAUSES",
    "AttemptLike",
    "GiveUp",
    "NextAttempt",
    "admits",
    "next_action",
    "not_before_ms",
]

CAUSE_LEASE_EXPIRED: Final = "lease_expired"
#: An attempt that gave its slot back while its provider quota was spent (see above).
CAUSE_QUOTA_WAIT: Final = "quota_wait"
#: How many times one step path may give its slot back for quota before it fails.
MAX_QUOTA_WAITS: Final = 100
#: The status of an attempt that ended waiting for sub-runs.
SUSPENDED: Final = "suspended"

#: Causes that are never retried (upstream's ``isTerminalRuntimeCauseEnvelope`` list).
TERMINAL_CAUSES: Final = frozenset(
    {
        "cancelled",
        "timeout",
        "capability_drift",
        "runtime_config_error",
        "step_schema_error",
        "max_visits_exceeded",
    }
)
#: Causes upstream's ``shouldAttemptFixerForError`` refuses to hand to the fixer.
_NOT_FIXABLE: Final = frozenset(
    {"cancelled", "timeout", "capability_drift", "runtime_config_error"}
)


class AttemptLike(Protocol):
    @property
    def status(self) -> str: ...

    @property
    def error(self) -> Any: ...


@dataclass(frozen=True)
class NextAttempt:
    """Run attempt ``attempt`` (1-based) as ``kind``."""

    attempt: int
    kind: DispatchKind


@dataclass(frozen=True)
class GiveUp:
    """The step failed for good with ``error`` (the last attempt's error envelope)."""

    error: Any


def cause_of(error: Any) -> Any:
    return error.get("causeCode") if isinstance(error, Mapping) else None


def next_action(
    step: StepPlan,
    attempts: Sequence[AttemptLike],
    *,
    default_max_attempts: int,
    max_crash_retries: int,
) -> NextAttempt | GiveUp:
    """The next attempt after ``attempts`` (all failed), or :class:`GiveUp`."""
    max_attempts = step.max_attempts or max(default_max_attempts, 1)
    kind: DispatchKind = "execute_step"
    worker_used = fixes_used = crashes = quota_waits = 0
    error: Any = None
    for attempt in attempts:
        if attempt.status == SUSPENDED:
            continue  # waited for sub-runs: the next attempt takes the call up, free
        error = attempt.error
        cause = cause_of(error)
        if cause == CAUSE_LEASE_EXPIRED:
            crashes += 1
            if crashes > max_crash_retries:
                return GiveUp(error)
            continue  # the same kind again, free of charge
        if cause == CAUSE_QUOTA_WAIT:
            quota_waits += 1
            if quota_waits > MAX_QUOTA_WAITS:
                return GiveUp(error)
            continue  # the same kind again once the quota is expected, free of charge
        if kind == "fix_step":
            return GiveUp(error)
        worker_used += 1
        if step.fixer_max_attempts > fixes_used and cause not in _NOT_FIXABLE:
            fixes_used += 1
            kind = "fix_step"
            continue
        retriable = not (isinstance(error, Mapping) and error.get("retriable") is False)
        if retriable and cause not in TERMINAL_CAUSES and worker_used < max_attempts:
            continue
        return GiveUp(error)
    return NextAttempt(len(attempts) + 1, kind)


def not_before_ms(attempts: Sequence[AttemptLike]) -> int | None:
    """When the attempt after ``attempts`` may start (milliseconds since the epoch): the last
    one's end plus its error's ``retryAfterMs`` when it gave its slot back for quota
    (``None``: at once). Read from the log, so every process that decides agrees."""
    if not attempts:
        return None
    last = attempts[-1]
    error = last.error
    if cause_of(error) != CAUSE_QUOTA_WAIT or not isinstance(error, Mapping):
        return None
    delay = error.get("retryAfterMs")
    ended = getattr(last, "finished_at", None)
    if not isinstance(delay, int) or isinstance(delay, bool) or not isinstance(ended, str):
        return None
    from little_dist.scheduling.times import epoch_ms

    at = epoch_ms(ended)
    return None if at is None else at + delay


def admits(
    step: StepPlan,
    attempts: Sequence[AttemptLike],
    attempt: int,
    kind: DispatchKind,
    *,
    scheduled: bool,
    default_max_attempts: int,
    max_crash_retries: int,
) -> bool:
    """Whether a task for ``attempt`` (as ``kind``) of a step whose recorded attempts are
    ``attempts`` is one the engine sends: an attempt that exists already, or the next one
    due — the first once it is ``scheduled`` (its ``StepScheduled`` recorded), a later one
    when every recorded attempt has ended and :func:`next_action` names it. A worker refuses
    any other (a stale or forged message) before running anything."""
    if attempt < 1 or attempt > len(attempts) + 1:
        return False
    if attempt <= len(attempts):
        return True
    if attempt == 1:
        return scheduled and kind == "execute_step"
    if any(recorded.status == "running" for recorded in attempts):
        return False
    following = next_action(
        step,
        attempts,
        default_max_attempts=default_max_attempts,
        max_crash_retries=max_crash_retries,
    )
    return (
        isinstance(following, NextAttempt)
        and following.attempt == attempt
        and following.kind == kind
    )
