"""Whole-log entry points over :class:`RunStateBuilder`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from little_dist.errors import InvalidInputError
from little_dist.events import Event
from little_dist.pricing import PriceFallback
from little_dist.run_state._fold import EventLike, RunStateBuilder, RunStateEventMismatchError
from little_dist.run_state._state import RunState

__all__ = ["fold_events", "materialize_run_state", "step_paths_in_event_order"]


def _run_id_of(event: EventLike) -> Any:
    return event.run_id if isinstance(event, Event) else event.get("runId")


def materialize_run_state(
    events: Iterable[EventLike],
    *,
    run_id: str | None = None,
    pricing_fallback: PriceFallback | None = None,
) -> RunState:
    """Fold a whole log (sequences 1..N of one run) into a :class:`RunState`.

    ``run_id`` defaults to the first event's; an empty log gives a pending state (and then
    needs ``run_id``). ``pricing_fallback`` prices models the registry lacks (see
    :class:`RunStateBuilder`; ``None`` is upstream's registry-only pricing). Raises
    :class:`RunStateEventMismatchError` for a gap, a duplicate or out-of-order sequence, or
    an event of another run.
    """
    iterator = iter(events)
    first = next(iterator, None)
    if run_id is None:
        if first is None:
            raise InvalidInputError("materialize_run_state needs run_id for an empty log")
        run_id = _run_id_of(first)
        if not isinstance(run_id, str):
            raise RunStateEventMismatchError(f"Event at index 0 has no runId: {run_id!r}")
    builder = RunStateBuilder(run_id, pricing_fallback=pricing_fallback)
    if first is not None:
        builder.apply(first)
        builder.apply_all(iterator)
    return builder.snapshot()


def fold_events(state: RunState, events: Iterable[EventLike]) -> RunState:
    """``state`` extended with the events that follow it; ``state`` is left unchanged.

    Equal to folding the whole log from the start (with the pricing source ``state`` was
    folded with). Cost is proportional to the new events
    plus one copy of the step index; a scheduler folding many small batches into one run
    should keep a :class:`RunStateBuilder` instead and snapshot when it needs a state.
    """
    builder = RunStateBuilder.from_state(state)
    builder.apply_all(events)
    return builder.snapshot()


def step_paths_in_event_order(events: Iterable[EventLike]) -> list[str]:
    """Every string ``payload.stepPath`` in the log, first appearance first."""
    seen: dict[str, None] = {}
    for event in events:
        payload = event.payload if isinstance(event, Event) else event.get("payload")
        if isinstance(payload, Mapping):
            path = payload.get("stepPath")
            if isinstance(path, str):
                seen.setdefault(path)
    return list(seen)
