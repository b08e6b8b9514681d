"""A run's state, folded from its event log: upstream's ``MaterializedRunState``.

Pure: no IO, no clock. ``materialize_run_state(events)`` folds a whole log;
``fold_events(state, more)`` extends a state; a :class:`RunStateBuilder` folds event by event
for a long-lived owner (the scheduler keeps one per active run) and hands out immutable
snapshots. ``state.to_json()`` is upstream's JSON shape.

Pricing: model calls are priced from the bundled registry; a ``pricing_fallback``
(``provider/model`` -> rates, e.g. :func:`little_dist.litellm_prices.litellm_price_fallback`)
prices the models it lacks. This package never imports litellm: the IO layer passes the
fallback in to each fold that reports cost (no process-wide default: a fold without one
prices from the registry alone, as upstream).

Ownership rule: a :class:`RunState` never changes once returned. A builder is private to
its owner; it copies whatever a snapshot shares before changing it (copy-on-write), so
snapshots and states passed to :func:`fold_events` are never disturbed. Payload values
(outputs, errors, metadata) are shared with the events, not copied: treat them as read-only.
"""

from __future__ import annotations

from little_dist.run_state._fold import (
    FOLDED_EVENT_TYPES,
    EventLike,
    RunStateBuilder,
    RunStateEventMismatchError,
)
from little_dist.run_state._journal import StepJournal
from little_dist.run_state._materialize import (
    fold_events,
    materialize_run_state,
    step_paths_in_event_order,
)
from little_dist.run_state._parallel import ParallelBranchState, ParallelGroupState
from little_dist.run_state._state import (
    RUN_ENDED,
    RunState,
    RunStatus,
    StepAttempt,
    StepState,
    StepStatus,
)

__all__ = [
    "FOLDED_EVENT_TYPES",
    "RUN_ENDED",
    "EventLike",
    "ParallelBranchState",
    "ParallelGroupState",
    "RunState",
    "RunStateBuilder",
    "RunStateEventMismatchError",
    "RunStatus",
    "StepAttempt",
    "StepJournal",
    "StepState",
    "StepStatus",
    "fold_events",
    "materialize_run_state",
    "step_paths_in_event_order",
]
