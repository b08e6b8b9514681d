"""What the in-process runner knows of its run: the folded state, and the facts of the log
its loop and attempts act on (the context ``decide`` gets, the run's limits, the events the
harness memo reads per step), kept from the events the attempts hand over and the log."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Final

from little_dist.event_types.engine import CANCEL_EVENT_TYPE, LIMITS_EVENT_TYPE
from little_dist.events import Event
from little_dist.pricing import PriceFallback
from little_dist.run_limits import RunLimits, cancel_error
from little_dist.run_state import RunState, RunStateBuilder
from little_dist.runtime import hydrate_events
from little_dist.scheduling import RunContext
from little_dist.world.base import World

__all__ = ["MEMO_TYPES", "RunView"]

# Event types whose payload the harness memo reads, indexed per step path as they are folded
# (session starts: the recorded capability manifests a resumed session is checked against).
MEMO_TYPES: Final = frozenset(
    {
        "harness.session.started",
        "HarnessSessionStarted",
        "harness.model.called",
        "harness.model.responded",
        "harness.tool_call.succeeded",
        "HarnessModelCalled",
        "HarnessModelResponded",
        "HarnessToolCallSucceeded",
    }
)


class RunView:
    """One run as its runner has folded it (see the module docstring)."""

    def __init__(
        self,
        world: World,
        run_id: str,
        context: RunContext,
        pricing_fallback: PriceFallback | None,
    ) -> None:
        self.world = world
        self.run_id = run_id
        #: What ``decide`` gets: updated from the log (inherited settings, a cancel request,
        #: the run's attempt limit).
        self.context = context
        #: The run's limits, as its log records them (see :mod:`little_dist.run_limits`).
        self.limits = RunLimits()
        self.builder = RunStateBuilder(run_id, pricing_fallback=pricing_fallback)
        self.memo_events: dict[str, list[Event]] = {}
        # Events the attempts appended (handed over by execute_step_attempt), by sequence,
        # not folded yet: folded from here instead of being read back from the log.
        self.recorded: dict[int, Event] = {}
        self.recorded_lock = threading.Lock()
        # An append of ours returned events that do not follow the folded ones (an attempt's
        # appends came in between, not handed over yet): the next look must read the log.
        self.behind = False

    def catch_up(self, *, read: bool = True) -> RunState:
        """Fold what the attempts handed over (while it follows on without a gap), then
        (``read``) whatever else the log has (other attempts' events in between, a cancel
        request)."""
        with self.recorded_lock:
            known = self.recorded
            self.recorded = {}
        count = self.builder.event_count
        handed: list[Event] = []
        while (event := known.pop(count + 1, None)) is not None:
            handed.append(event)
            count += 1
        self.fold(handed)
        if read or known:  # (a gap: another writer's events came in between, a sub-run's loan)
            self.fold(self.world.list_events(self.run_id, after=self.builder.event_count))
        if known:  # out of order: what is still ahead of the fold waits for the next look
            done = self.builder.event_count
            with self.recorded_lock:
                for sequence, event in known.items():
                    if sequence > done:
                        self.recorded.setdefault(sequence, event)
        return self.builder.snapshot()

    def handed_over(self, events: Sequence[Event]) -> None:
        """``on_recorded`` of the attempts (any thread)."""
        with self.recorded_lock:
            for event in events:
                self.recorded[event.sequence] = event

    def fold(self, events: list[Event]) -> None:
        if not events:
            return
        self.builder.apply_all(hydrate_events(self.world, events))
        for event in events:
            if event.type == "RunStarted" and event.payload.get("inherited") is not None:
                # (a sub-run: its attempts apply what it inherits, as its log records it)
                self.context = dataclasses.replace(
                    self.context, inherited=event.payload["inherited"]
                )
            if event.type == CANCEL_EVENT_TYPE and not self.context.cancel_requested:
                # (``little cancel``, a sub-run's parent stopping, the caller's cancel
                # handle, the run's deadline): decide fails the run
                self.context = dataclasses.replace(
                    self.context,
                    cancel_requested=True,
                    cancel_error=cancel_error(event.payload),
                )
            if event.type == LIMITS_EVENT_TYPE and not self.limits:
                self.limits = RunLimits.from_payload(event.payload)
                if self.limits.max_attempts is not None:
                    self.context = dataclasses.replace(
                        self.context, default_max_attempts=self.limits.max_attempts
                    )
            if event.type in MEMO_TYPES:
                path = event.payload.get("stepPath")
                if isinstance(path, str):
                    self.memo_events.setdefault(path, []).append(event)

    def fold_appended(self, recorded: list[Event]) -> bool:
        """Fold the new events of one append of ours when they follow the folded ones (one
        atomic batch: contiguous, nothing of anyone else's between); whether any was new."""
        last = self.builder.event_count
        new = [event for event in recorded if event.sequence > last]
        if new and new[0].sequence == last + 1:
            self.fold(new)
        elif new:
            self.behind = True  # others' events came in between: the next look reads them
        return bool(new)
