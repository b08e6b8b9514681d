"""What the World implementations share: default methods for worlds that have no round trip
to save (mixins), the checks every world makes of its input, and the preparation of events
for an append. :mod:`little_dist.world.base` holds the :class:`~little_dist.world.base.World`
protocol and its data types; this module holds what its implementations reuse.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from little_dist.canonical import canonical_json_exact
from little_dist.errors import InvalidInputError
from little_dist.events import (
    AFTER_END_EVENT_TYPES,
    RUN_END_EVENT_TYPES,
    USAGE_EVENT_TYPES,
    Event,
    EventInput,
    recorded_event,
)
from little_dist.ids import InvalidIdError, event_id_for_payload_json, validate_run_id
from little_dist.lazy import cached
from little_dist.world.base import (
    ArtifactInput,
    Fence,
    LateEvent,
    Lease,
    LeaseRequest,
    UndecodedEvent,
    World,
)

__all__ = [
    "DEFINITION_HASH_PATTERN",
    "VERSION_ID_PATTERN",
    "AppendsInOneProcess",
    "DecodesEveryEvent",
    "LeasesOneByOne",
    "PreparedEvent",
    "SequentialAppendThenAcquire",
    "SequentialArtifactsThenAppend",
    "WaitForEndByFollowing",
    "check_event_window",
    "check_lease_request",
    "check_submission",
    "late_events_of",
    "prepare_events",
    "refused_after_end",
    "releasing_fence",
    "validate_definition_hash",
    "validate_version_id",
]

VERSION_ID_PATTERN = re.compile(r"^wfver_[A-Za-z0-9_-]{1,80}$")
DEFINITION_HASH_PATTERN = re.compile(r"^sha256:[0-9a-f]{64}$")
_parse_json = json.JSONDecoder().raw_decode


class _AppendsBatches(Protocol):
    """What :class:`AppendsInOneProcess` needs of its world."""

    def _append_batch(
        self,
        run_id: str,
        events: Sequence[EventInput],
        *,
        expected_sequence: int | None,
        fence: Fence | None,
    ) -> list[Event]: ...

    def _follow(self, run_id: str, after: int, timeout: float | None) -> Iterator[Event]: ...

    def release_lease(self, lease: Lease) -> None: ...


class AppendsInOneProcess:
    """``append``, ``append_batch`` and ``follow`` of a world with no scheduler to signal
    (``MemoryWorld``, ``LocalWorld``): every append is the world's own ``_append_batch``
    (input checked, then the atomic write), a release follows it (:func:`releasing_fence`;
    ``LocalWorld`` has its own ``append_batch``, which releases in the append's
    transaction), and ``follow`` checks its window before the world's own ``_follow`` waits
    for events."""

    def append(
        self: _AppendsBatches,
        run_id: str,
        event: EventInput,
        *,
        expected_sequence: int | None = None,
        fence: Fence | None = None,
    ) -> Event:
        (recorded,) = AppendsInOneProcess.append_batch(
            self, run_id, [event], expected_sequence=expected_sequence, fence=fence
        )
        return recorded

    def append_batch(
        self: _AppendsBatches,
        run_id: str,
        events: Sequence[EventInput],
        *,
        expected_sequence: int | None = None,
        fence: Fence | None = None,
        signal: bool = True,
        release: bool = False,
    ) -> list[Event]:
        del signal  # no scheduler to signal
        with releasing_fence(self, fence, release):
            return self._append_batch(
                run_id, events, expected_sequence=expected_sequence, fence=fence
            )

    def follow(
        self: _AppendsBatches, run_id: str, *, after: int = 0, timeout: float | None = None
    ) -> Iterator[Event]:
        validate_run_id(run_id)
        check_event_window(after, None)
        return self._follow(run_id, after, timeout)


class LeasesOneByOne:
    """``acquire_leases`` for worlds with no round trip to save: one acquire per request."""

    def acquire_leases(self: World, requests: Sequence[LeaseRequest]) -> list[Lease | None]:
        return [self.acquire_lease(r.key, r.holder, r.ttl_seconds) for r in requests]


class SequentialAppendThenAcquire:
    """``append_batch_then_acquire`` for worlds with no round trip to save (in memory): the
    append, then the acquire (none if the append raised)."""

    def append_batch_then_acquire(
        self: World,
        run_id: str,
        events: Sequence[EventInput],
        lease: LeaseRequest,
        *,
        fence: Fence | None = None,
        signal: bool = True,
        release: bool = False,
    ) -> tuple[list[Event], Lease | None]:
        recorded = self.append_batch(run_id, events, fence=fence, signal=signal, release=release)
        return recorded, self.acquire_lease(lease.key, lease.holder, lease.ttl_seconds)


class SequentialArtifactsThenAppend:
    """``append_batch_with_artifacts`` for worlds with no round trip to save: each put,
    then the append."""

    def append_batch_with_artifacts(
        self: World,
        run_id: str,
        events: Sequence[EventInput],
        artifacts: Sequence[ArtifactInput],
        *,
        fence: Fence | None = None,
        signal: bool = True,
        release: bool = False,
    ) -> list[Event]:
        for artifact in artifacts:
            self.put_artifact(artifact)
        return self.append_batch(run_id, events, fence=fence, signal=signal, release=release)


class DecodesEveryEvent:
    """``list_events_partly`` and ``follow_partly`` for worlds whose events are decoded
    when read anyway (in memory, on the local disk): every event, decoded."""

    def list_events_partly(
        self: World,
        run_id: str,
        *,
        after: int,
        decode: frozenset[str],
        skip: Collection[int] = (),
    ) -> list[Event | UndecodedEvent]:
        events = self.list_events(run_id, after=after)
        if skip:
            return [event for event in events if event.sequence not in skip]
        return list(events)

    def follow_partly(
        self: World,
        run_id: str,
        *,
        after: int = 0,
        timeout: float | None = None,
        decode: frozenset[str],
    ) -> Iterator[Event | UndecodedEvent]:
        return iter(self.follow(run_id, after=after, timeout=timeout))


class WaitForEndByFollowing:
    """``wait_for_end`` for worlds whose :meth:`World.follow` is cheap (in memory, on the
    local disk): follow the log until an end event."""

    def wait_for_end(self: World, run_id: str, *, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        after = 0
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            # follow() ends after `remaining` seconds without an event; loop to re-check.
            for event in self.follow(run_id, after=after, timeout=remaining):
                if event.type in RUN_END_EVENT_TYPES:
                    return True
                after = event.sequence
                if deadline is not None and time.monotonic() >= deadline:
                    break


class _ReleasesLeases(Protocol):
    def release_lease(self, lease: Lease) -> None: ...


@contextmanager
def releasing_fence(world: _ReleasesLeases, fence: Fence | None, release: bool) -> Iterator[None]:
    """``append_batch(release=True)`` for worlds without a fused commit-and-release: the
    block appends, then the fence's lease is released whatever happened, if it is still
    the fence's tenure (token, and holder when the fence names one: the memory and local
    worlds' ``release_lease`` compares the holder unless it is empty)."""
    try:
        yield
    finally:
        if release and fence is not None:
            world.release_lease(Lease(fence.key, fence.holder or "", fence.token, 0.0))


def validate_version_id(version_id: object) -> str:
    """Return ``version_id`` if it is ``wfver_`` + 1-80 of ``[A-Za-z0-9_-]``; raise otherwise.

    Version ids name files and keys, so anything else is refused before storage is touched.
    """
    if not isinstance(version_id, str) or not VERSION_ID_PATTERN.fullmatch(version_id):
        raise InvalidIdError(
            f"Invalid workflow version id: {version_id!r} "
            "(expected 'wfver_' followed by 1-80 of A-Z a-z 0-9 _ -)"
        )
    return version_id


def validate_definition_hash(definition_hash: object) -> str:
    """Return ``definition_hash`` if it is ``sha256:`` + 64 lowercase hex; raise otherwise."""
    if not isinstance(definition_hash, str) or not DEFINITION_HASH_PATTERN.fullmatch(
        definition_hash
    ):
        raise InvalidInputError(
            f"Invalid workflow definition hash: {definition_hash!r} "
            "(expected 'sha256:' followed by 64 lowercase hex digits)"
        )
    return definition_hash


def check_lease_request(key: object, holder: object, ttl_seconds: object) -> None:
    """Refuse an empty lease key or holder and a non-positive or non-finite TTL."""
    if not isinstance(key, str) or not key:
        raise InvalidInputError(f"Lease key must be a non-empty string, got {key!r}")
    if not isinstance(holder, str) or not holder:
        raise InvalidInputError(f"Lease holder must be a non-empty string, got {holder!r}")
    if (
        isinstance(ttl_seconds, bool)
        or not isinstance(ttl_seconds, int | float)
        or not 0 < ttl_seconds < float("inf")
    ):
        raise InvalidInputError(f"Lease TTL must be a positive number of seconds: {ttl_seconds!r}")


def check_submission(run_id: object, input_hash: object) -> None:
    """Refuse a bad run id or an input hash that is not ``sha256:`` + 64 lowercase hex."""
    validate_run_id(run_id)
    if not isinstance(input_hash, str) or not DEFINITION_HASH_PATTERN.fullmatch(input_hash):
        raise InvalidInputError(
            f"Invalid input hash: {input_hash!r} (expected 'sha256:' followed by 64 lowercase "
            "hex digits)"
        )


def check_event_window(after: object, limit: object) -> None:
    """Refuse an ``after`` that is not a sequence number >= 0 or a negative ``limit``."""
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise InvalidInputError(f"'after' must be a sequence number >= 0, got {after!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise InvalidInputError(f"'limit' must be an integer >= 0 or None, got {limit!r}")


@dataclass(frozen=True)
class PreparedEvent:
    """An :class:`EventInput` encoded once, before any lock is taken.

    ``payload_json`` is the canonical JSON worlds store; ``payload`` is that text read back
    (on first use: a batch of submissions never reads it), which is what every reader (and
    the event id) sees; :func:`prepare_events` sets it to the input's own payload when that
    equals the text read back (:func:`~little_dist.canonical.canonical_json_exact`). A
    writer that prints the canonical JSON itself (from a template, see
    :func:`little_dist.planner.fixed.fixed_plan_start`) hands these to an append instead of
    :class:`EventInput` values.
    """

    type: str
    occurrence_id: str | None
    payload_json: str

    @cached
    def payload(self) -> dict[str, Any]:
        # (raw_decode: json.loads adds a whitespace scan and checks, a tenth of the parse of
        # a small payload, and every recorded event's payload is parsed; text after the
        # document still raises, as json.loads would)
        text = self.payload_json
        value, end = _parse_json(text)
        if end != len(text):
            value = json.loads(text)
        return value  # type: ignore[no-any-return]

    def to_event(self, run_id: str, sequence: int, recorded_at: str) -> Event:
        """The envelope of this input recorded at ``sequence`` (a positive sequence the world
        assigned: its fields are checked ones, see :func:`recorded_event`). The id hashes
        the stored text, not the payload encoded again."""
        event_id = event_id_for_payload_json(
            run_id, sequence, self.type, self.payload_json, self.occurrence_id
        )
        return recorded_event(
            event_id, run_id, sequence, self.type, self.occurrence_id, recorded_at, self.payload
        )


def refused_after_end(new: Sequence[PreparedEvent]) -> bool:
    """Whether an append of ``new`` (the inputs not recorded yet) to a run that has ended is
    refused: it is, unless every one of them is of :data:`AFTER_END_EVENT_TYPES`."""
    return any(item.type not in AFTER_END_EVENT_TYPES for item in new)


def late_events_of(
    run_id: str, refused: Sequence[PreparedEvent], recorded_at: str
) -> list[LateEvent]:
    """The late record of a refused append: its events that carry model usage."""
    return [
        LateEvent(run_id, item.type, item.payload, recorded_at, item.occurrence_id)
        for item in refused
        if item.type in USAGE_EVENT_TYPES
    ]


def prepare_events(events: Sequence[EventInput | PreparedEvent]) -> list[PreparedEvent]:
    """Encode inputs for an append; a payload with no canonical JSON form raises here. An
    input already prepared is taken as it is."""
    prepared: list[PreparedEvent] = []
    for event in events:
        if type(event) is PreparedEvent:
            prepared.append(event)
            continue
        if not isinstance(event, EventInput):
            raise InvalidInputError(f"Append takes EventInput values, got {type(event).__name__}")
        payload = event.payload
        text, exact = canonical_json_exact(payload)
        item = PreparedEvent(event.type, event.occurrence_id, text)
        if exact:
            # The text read back would equal the input's own payload (which the input owns:
            # validation copied the writer's dict): its ``payload``, without the parse.
            item.__dict__["payload"] = payload
        prepared.append(item)
    return prepared
