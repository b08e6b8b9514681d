"""The world conformance suite: one body of tests every ``World`` implementation runs.

A test module opts in by subclassing the suite classes and providing one fixture,
``make_world``: a zero-argument callable returning a fresh, empty :class:`WorldHandle` (a
new world on new storage each call; the suite closes it at teardown)::

    class TestLocalWorld(WorldConformance, CrossProcessConformance):
        @pytest.fixture
        def make_world(self, tmp_path: Path) -> Callable[[], WorldHandle]: ...

``WorldConformance`` holds what every world must do, in one process.
``CrossProcessConformance`` adds real ``spawn`` processes that open the same world through
:func:`little_dist.world.factory.open_world` (``handle.spec``); worlds that live in one
process (``MemoryWorld``) do not include it.
"""

from __future__ import annotations

import math
import multiprocessing
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from little_dist.canonical import canonical_json
from little_dist.errors import ConflictError, InvalidInputError, LeaseLostError, RunEndedError
from little_dist.events import Event, EventInput
from little_dist.ids import InvalidIdError, event_id_for
from little_dist.world.artifacts import artifact_ref_for, payload_sha256
from little_dist.world.base import (
    ArtifactInput,
    ArtifactNotFoundError,
    Fence,
    LeaseRequest,
    SequenceConflictError,
    UndecodedEvent,
    VersionNotFoundError,
    World,
)
from little_dist.world.factory import open_world
from tests.conftest import load_vectors

__all__ = [
    "CrossProcessConformance",
    "FakeClock",
    "VersionIndexConformance",
    "WorldConformance",
    "WorldHandle",
]

ISO_MILLIS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
RUN = "run_suite"
ARTIFACT_CASES = load_vectors("ids")["examples"]["artifact_ids"]["cases"]


class FakeClock:
    """An epoch clock that moves only when told to; inject it as a world's ``clock``."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


@dataclass
class WorldHandle:
    """A fresh world under test and what the suite needs to look behind it.

    * ``world``: the world, empty.
    * ``blob_count``: how many distinct artifact blobs (files, objects) its storage holds.
    * ``advance``: let ``seconds`` of lease time pass (move a fake clock, or sleep when the
      world keeps real time, e.g. Redis TTLs).
    * ``spec``: a string another process passes to ``open_world`` to reach the SAME world;
      ``None`` for a process-local world.
    """

    world: World
    blob_count: Callable[[], int]
    advance: Callable[[float], None]
    spec: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def ev(
    event_type: str = "StepScheduled", occurrence_id: str | None = None, **payload: Any
) -> EventInput:
    return EventInput(type=event_type, payload=payload, occurrence_id=occurrence_id)


# -- child-process bodies (top level so 'spawn' can import them) ----------------------------


def _append_writer(
    spec: str, run_id: str, writer: int, count: int, barrier: Any, errors: Any
) -> None:
    try:
        world = open_world(spec)
        try:
            barrier.wait(timeout=60)
            for index in range(count):
                world.append(run_id, ev("little.test.write", writer=writer, index=index))
        finally:
            world.close()
    except BaseException as error:
        errors.put(f"writer {writer}: {error!r}")
        raise


def _occurrence_racer(
    spec: str, run_id: str, racer: int, occurrence_ids: list[str], barrier: Any, results: Any
) -> None:
    world = open_world(spec)
    try:
        barrier.wait(timeout=60)
        order = occurrence_ids if racer % 2 == 0 else list(reversed(occurrence_ids))
        seen = {
            occ: world.append(run_id, ev("little.test.once", occurrence_id=occ, occ=occ)).event_id
            for occ in order
        }
        results.put((racer, seen))
    finally:
        world.close()


def _submission_claimer(spec: str, run_id: str, claimer: int, barrier: Any, results: Any) -> None:
    world = open_world(spec)
    try:
        barrier.wait(timeout=60)
        results.put((claimer, world.claim_submission(run_id, _input_hash(claimer))))
    finally:
        world.close()


def _input_hash(n: int) -> str:
    return "sha256:" + f"{n:x}".rjust(64, "0")


def _assert_contiguous(events: list[Event], run_id: str) -> None:
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert all(e.run_id == run_id for e in events)


class _Fixtures:
    @pytest.fixture
    def handle(self, make_world: Callable[[], WorldHandle]) -> Iterator[WorldHandle]:
        handle = make_world()
        try:
            yield handle
        finally:
            handle.world.close()


class VersionIndexConformance(_Fixtures):
    """The version index: definition hash -> version ids, append-only, oldest first."""

    DEFINITION = "sha256:" + "d" * 64
    OTHER = "sha256:" + "e" * 64

    def test_index_is_append_only_idempotent_and_oldest_first(self, handle: WorldHandle) -> None:
        world = handle.world
        assert world.indexed_versions(self.DEFINITION) == []
        world.index_version(self.DEFINITION, "wfver_bbbbbbbbbbbbbbbb")
        world.index_version(self.DEFINITION, "wfver_aaaaaaaaaaaaaaaa")
        world.index_version(self.DEFINITION, "wfver_bbbbbbbbbbbbbbbb")
        world.index_version(self.OTHER, "wfver_aaaaaaaaaaaaaaaa")
        assert world.indexed_versions(self.DEFINITION) == [
            "wfver_bbbbbbbbbbbbbbbb",
            "wfver_aaaaaaaaaaaaaaaa",
        ]
        assert world.indexed_versions(self.OTHER) == ["wfver_aaaaaaaaaaaaaaaa"]
        # Readers get a copy.
        world.indexed_versions(self.DEFINITION).append("wfver_cccccccccccccccc")
        assert len(world.indexed_versions(self.DEFINITION)) == 2

    def test_index_refuses_malformed_hashes_and_ids(self, handle: WorldHandle) -> None:
        world = handle.world
        for bad_hash in ("", "sha256:xyz", "d" * 64, "sha256:" + "D" * 64):
            with pytest.raises(InvalidInputError):
                world.index_version(bad_hash, "wfver_aaaaaaaaaaaaaaaa")
            with pytest.raises(InvalidInputError):
                world.indexed_versions(bad_hash)
        for bad_id in ("", "wfver_", "../wfver_x", "version"):
            with pytest.raises(InvalidIdError):
                world.index_version(self.DEFINITION, bad_id)
        assert world.indexed_versions(self.DEFINITION) == []

    def test_threads_indexing_the_same_pairs_record_each_once(self, handle: WorldHandle) -> None:
        world = handle.world
        ids = [f"wfver_{index:016x}" for index in range(5)]
        errors: list[BaseException] = []

        def index_all() -> None:
            try:
                for version_id in ids:
                    world.index_version(self.DEFINITION, version_id)
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=index_all) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert sorted(world.indexed_versions(self.DEFINITION)) == ids
        assert len(world.indexed_versions(self.DEFINITION)) == len(ids)


class WorldConformance(VersionIndexConformance):
    """What every world guarantees (see ``little_dist.world.base``), the version index included."""

    # -- appends ----------------------------------------------------------------------------

    def test_append_assigns_contiguous_sequences_and_deterministic_ids(
        self, handle: WorldHandle
    ) -> None:
        world = handle.world
        assert world.last_sequence(RUN) == 0
        first = world.append(RUN, ev("RunStarted", workflowVersionId="wfver_1"))
        second = world.append(RUN, ev(stepPath="extract"), expected_sequence=1)
        third = world.append(RUN, ev("StepAttemptStarted", "occ-1", stepPath="extract"))
        assert [first.sequence, second.sequence, third.sequence] == [1, 2, 3]
        for event in (first, second, third):
            assert event.event_id == event_id_for(
                RUN, event.sequence, event.type, event.payload, event.occurrence_id
            )
            assert ISO_MILLIS.match(event.recorded_at)
        assert third.occurrence_id == "occ-1"
        assert world.last_sequence(RUN) == 3
        assert world.list_events(RUN) == [first, second, third]

    def test_a_partial_read_gives_every_event_decoded_or_decodable(
        self, handle: WorldHandle
    ) -> None:
        # A reader that needs some payloads only (a fold) may get the others undecoded;
        # whatever comes back is every event, in order, and decodes to what a full read gives.
        world = handle.world
        world.append(RUN, ev("RunStarted", workflowVersionId="wfver_1"))
        world.append_batch(
            RUN,
            [
                ev("harness.tool_call.started", "tool:a:1:1", stepPath="a", args={"x": [1]}),
                ev("StepCompleted", "end:a:1", stepPath="a", output={"ok": True}),
                ev("harness.session.completed", "session-end:a:1", stepPath="a"),
            ],
        )
        full = world.list_events(RUN)
        wanted = frozenset({"RunStarted", "StepCompleted"})
        for after in (0, 2):
            partly = world.list_events_partly(RUN, after=after, decode=wanted)
            assert [e.sequence for e in partly] == [e.sequence for e in full[after:]]
            assert [e.type for e in partly] == [e.type for e in full[after:]]
            decoded = [e.decode() if isinstance(e, UndecodedEvent) else e for e in partly]
            assert decoded == full[after:]
            # The payloads asked for are always there (in an event, or parsed beside it).
            by_sequence = {e.sequence: e for e in full}
            for event in partly:
                if event.type in wanted:
                    assert event.payload == by_sequence[event.sequence].payload
                    if isinstance(event, UndecodedEvent):
                        assert event.envelope()["payload"] == event.payload
        followed = list(world.follow_partly(RUN, after=1, timeout=0.2, decode=wanted))
        assert [e.decode() if isinstance(e, UndecodedEvent) else e for e in followed] == full[1:]

    def test_a_partial_read_leaves_out_the_sequences_the_reader_holds(
        self, handle: WorldHandle
    ) -> None:
        # A reader that folded up to 1 and holds 3, 4 and 6 (its own appends, past a gap)
        # gets 2, 5 and 7 on, in order; 17 scattered holes read the same as a few.
        world = handle.world
        world.append_batch(RUN, [ev("little.note", None, n=index) for index in range(8)])
        full = world.list_events(RUN)

        def read(after: int, skip: set[int]) -> list[int]:
            partly = world.list_events_partly(
                RUN, after=after, decode=frozenset({"little.note"}), skip=skip
            )
            decoded = [e.decode() if isinstance(e, UndecodedEvent) else e for e in partly]
            assert all(e.payload is not None for e in partly)
            assert decoded == [e for e in full if e.sequence > after and e.sequence not in skip]
            return [e.sequence for e in partly]

        assert read(1, {3, 4, 6}) == [2, 5, 7, 8]
        assert read(0, {1, 8}) == [2, 3, 4, 5, 6, 7]
        assert read(4, {2, 3}) == [5, 6, 7, 8]
        world.append_batch(RUN, [ev("little.note", None, n=index) for index in range(40)])
        full = world.list_events(RUN)
        evens = set(range(2, 48, 2))  # more holes than a world reads as ranges
        assert read(0, evens) == [s for s in range(1, 49) if s not in evens]

    def test_payload_is_stored_in_canonical_form(self, handle: WorldHandle) -> None:
        payload = {"b": 1.0, "a": {"z": [1, 2.5, None], "y": "✓"}}
        appended = handle.world.append(RUN, EventInput(type="StepCompleted", payload=payload))
        (stored,) = handle.world.list_events(RUN)
        assert stored == appended
        assert stored.payload == payload
        assert list(stored.payload) == ["a", "b"]
        assert type(stored.payload["b"]) is int  # 1.0 is the JSON number 1, as upstream stores it

    def test_unknown_run_is_empty(self, handle: WorldHandle) -> None:
        assert handle.world.list_events("run_nothing_here") == []
        assert handle.world.last_sequence("run_nothing_here") == 0

    def test_conflicting_expected_sequence_is_refused_and_writes_nothing(
        self, handle: WorldHandle
    ) -> None:
        world = handle.world
        world.append(RUN, ev(stepPath="a"))
        world.append(RUN, ev(stepPath="b"))
        for expected in (0, 1, 3):
            with pytest.raises(SequenceConflictError) as caught:
                world.append(RUN, ev(stepPath="late"), expected_sequence=expected)
            assert (caught.value.expected, caught.value.actual) == (expected, 2)
            assert isinstance(caught.value, ConflictError)
        assert world.last_sequence(RUN) == 2
        assert world.append(RUN, ev(stepPath="c"), expected_sequence=2).sequence == 3

    def test_retried_occurrence_lands_once_and_returns_the_first_event(
        self, handle: WorldHandle
    ) -> None:
        world = handle.world
        first = world.append(RUN, ev("StepCompleted", "occ-x", stepPath="a", output=1))
        world.append(RUN, ev(stepPath="b"))
        again = world.append(RUN, ev("StepCompleted", "occ-x", stepPath="a", output=1))
        # Even with a stale expected sequence: the fact is already recorded.
        stale = world.append(
            RUN, ev("StepCompleted", "occ-x", stepPath="a", output=1), expected_sequence=0
        )
        assert again == first
        assert stale == first
        assert world.last_sequence(RUN) == 2
        # Occurrence ids are scoped to their run.
        other = world.append("run_other", ev("StepCompleted", "occ-x", stepPath="a", output=1))
        assert other.sequence == 1

    def test_payload_without_canonical_form_is_refused_and_writes_nothing(
        self, handle: WorldHandle
    ) -> None:
        with pytest.raises(InvalidInputError):
            handle.world.append(RUN, EventInput(type="StepCompleted", payload={"x": math.nan}))
        with pytest.raises(InvalidInputError):
            handle.world.append_batch(
                RUN, [ev(stepPath="ok"), EventInput(type="X", payload={"s": {1, 2}})]
            )
        assert handle.world.last_sequence(RUN) == 0

    def test_invalid_run_id_is_refused_before_anything_is_written(
        self, handle: WorldHandle
    ) -> None:
        world = handle.world
        for bad in ("", "run_", "runx", "run_a/b", "run_../x", "run_" + "a" * 81, "RUN_a"):
            with pytest.raises(InvalidIdError):
                world.append(bad, ev(stepPath="a"))
            with pytest.raises(InvalidIdError):
                world.append_batch(bad, [ev(stepPath="a")])
            with pytest.raises(InvalidIdError):
                world.list_events(bad)
            with pytest.raises(InvalidIdError):
                world.last_sequence(bad)
            with pytest.raises(InvalidIdError):
                world.follow(bad, timeout=0)
            with pytest.raises(InvalidIdError):
                world.put_artifact(ArtifactInput(run_id=bad, name="x", payload=1))
        assert world.list_run_ids() == []
        assert handle.blob_count() == 0

    def test_list_events_after_and_limit(self, handle: WorldHandle) -> None:
        world = handle.world
        world.append_batch(RUN, [ev(stepPath=f"s{i}") for i in range(10)])
        assert [e.sequence for e in world.list_events(RUN, after=7)] == [8, 9, 10]
        assert [e.sequence for e in world.list_events(RUN, after=2, limit=3)] == [3, 4, 5]
        assert [e.sequence for e in world.list_events(RUN, limit=2)] == [1, 2]
        assert world.list_events(RUN, after=10) == []
        assert world.list_events(RUN, after=50) == []
        assert world.list_events(RUN, after=3, limit=0) == []
        with pytest.raises(InvalidInputError):
            world.list_events(RUN, after=-1)
        with pytest.raises(InvalidInputError):
            world.list_events(RUN, limit=-1)

    def test_list_run_ids(self, handle: WorldHandle) -> None:
        world = handle.world
        assert world.list_run_ids() == []
        for run_id in ("run_b", "run_a", "run_c-1", "run_a"):
            world.append(run_id, ev(stepPath="x"))
        assert world.list_run_ids() == ["run_a", "run_b", "run_c-1"]

    # -- batches ----------------------------------------------------------------------------

    def test_batch_appends_in_order_and_atomically(self, handle: WorldHandle) -> None:
        world = handle.world
        assert world.append_batch(RUN, []) == []
        events = world.append_batch(RUN, [ev(stepPath=f"s{i}") for i in range(3)])
        assert [e.sequence for e in events] == [1, 2, 3]
        assert [e.payload["stepPath"] for e in events] == ["s0", "s1", "s2"]
        with pytest.raises(SequenceConflictError):
            world.append_batch(RUN, [ev(stepPath="x"), ev(stepPath="y")], expected_sequence=2)
        assert world.last_sequence(RUN) == 3
        more = world.append_batch(RUN, [ev(stepPath="x"), ev(stepPath="y")], expected_sequence=3)
        assert [e.sequence for e in more] == [4, 5]
        assert world.list_events(RUN) == events + more

    def test_batch_returns_recorded_occurrences_and_appends_only_new_ones(
        self, handle: WorldHandle
    ) -> None:
        world = handle.world
        recorded = world.append(RUN, ev("StepScheduled", "occ-a", stepPath="a"))
        batch = world.append_batch(
            RUN,
            [
                ev("StepScheduled", "occ-a", stepPath="a"),
                ev("StepScheduled", "occ-b", stepPath="b"),
                ev("StepScheduled", None, stepPath="c"),
                ev("StepScheduled", "occ-b", stepPath="b"),  # repeated within the batch
            ],
            expected_sequence=1,
        )
        assert batch[0] == recorded
        assert [e.sequence for e in batch] == [1, 2, 3, 2]
        assert batch[3] == batch[1]
        assert world.last_sequence(RUN) == 3
        # A batch whose every input is recorded is a pure read, whatever it expected.
        retried = world.append_batch(
            RUN,
            [
                ev("StepScheduled", "occ-a", stepPath="a"),
                ev("StepScheduled", "occ-b", stepPath="b"),
            ],
            expected_sequence=0,
        )
        assert retried == [batch[0], batch[1]]
        assert world.last_sequence(RUN) == 3

    def test_a_recorded_occurrence_after_new_ones_leaves_no_row_behind(
        self, handle: WorldHandle
    ) -> None:
        # Distinct ids, the recorded one in the middle: a world that inserts first and looks
        # up on a refusal must take back the rows it inserted before it.
        world = handle.world
        recorded = world.append(RUN, ev("StepScheduled", "occ-a", stepPath="a"))
        batch = world.append_batch(
            RUN,
            [
                ev("StepScheduled", "occ-x", stepPath="x"),
                ev("StepScheduled", "occ-a", stepPath="a"),
                ev("StepScheduled", "occ-y", stepPath="y"),
            ],
        )
        assert batch[1] == recorded
        assert [(e.sequence, e.occurrence_id) for e in batch] == [
            (2, "occ-x"),
            (1, "occ-a"),
            (3, "occ-y"),
        ]
        assert world.list_events(RUN) == [recorded, batch[0], batch[2]]
        # A row left behind would show here: an end before the recorded id, then a new one
        # (left behind, the end would seal the log before the last event's turn).
        ended = world.append_batch(
            RUN,
            [
                ev("RunFailed", "fail-z"),
                ev("StepScheduled", "occ-a", stepPath="a"),
                ev("StepScheduled", "occ-z", stepPath="z"),
            ],
        )
        assert [(e.sequence, e.type) for e in ended] == [
            (4, "RunFailed"),
            (1, "StepScheduled"),
            (5, "StepScheduled"),
        ]

    def test_batch_with_a_stale_expected_sequence_writes_none_of_it(
        self, handle: WorldHandle
    ) -> None:
        world = handle.world
        world.append(RUN, ev("StepScheduled", "occ-a", stepPath="a"))
        world.append(RUN, ev(stepPath="b"))
        with pytest.raises(SequenceConflictError):
            world.append_batch(
                RUN,
                [ev("StepScheduled", "occ-a", stepPath="a"), ev("StepScheduled", "occ-new")],
                expected_sequence=1,
            )
        assert world.last_sequence(RUN) == 2
        assert [e.occurrence_id for e in world.list_events(RUN)] == ["occ-a", None]

    # -- concurrency within one process -----------------------------------------------------

    def test_threads_appending_to_one_run_get_contiguous_sequences(
        self, handle: WorldHandle
    ) -> None:
        world = handle.world
        writers, per_writer = 8, 60
        barrier = threading.Barrier(writers)
        failures: list[BaseException] = []

        def write(writer: int) -> None:
            try:
                barrier.wait(timeout=30)
                for index in range(per_writer):
                    world.append(RUN, ev("little.test.write", writer=writer, index=index))
            except BaseException as error:  # reported below, with the log checks
                failures.append(error)

        threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert failures == []
        events = world.list_events(RUN)
        assert len(events) == writers * per_writer
        _assert_contiguous(events, RUN)
        written = sorted((e.payload["writer"], e.payload["index"]) for e in events)
        assert written == [(w, i) for w in range(writers) for i in range(per_writer)]

    def test_threads_racing_one_occurrence_id_record_it_once(self, handle: WorldHandle) -> None:
        world = handle.world
        racers = 8
        barrier = threading.Barrier(racers)
        results: list[Event] = []
        lock = threading.Lock()

        def race() -> None:
            barrier.wait(timeout=30)
            event = world.append(RUN, ev("StepAttemptStarted", "occ-race", stepPath="a"))
            with lock:
                results.append(event)

        threads = [threading.Thread(target=race) for _ in range(racers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert len(results) == racers
        assert {e.event_id for e in results} == {results[0].event_id}
        assert world.last_sequence(RUN) == 1

    # -- follow -----------------------------------------------------------------------------

    def test_follow_yields_events_appended_while_following_and_ends_after_timeout(
        self, handle: WorldHandle
    ) -> None:
        world = handle.world
        world.append(RUN, ev(stepPath="before-0"))
        world.append(RUN, ev(stepPath="before-1"))

        def writer() -> None:
            for index in range(3):
                time.sleep(0.05)
                world.append(RUN, ev(stepPath=f"during-{index}"))

        thread = threading.Thread(target=writer)
        started = time.monotonic()
        thread.start()
        seen = [e.payload["stepPath"] for e in world.follow(RUN, after=1, timeout=0.6)]
        elapsed = time.monotonic() - started
        thread.join()
        assert seen == ["before-1", "during-0", "during-1", "during-2"]
        # It waited for quiet (0.6 s after the last event), and not much longer.
        assert 0.6 <= elapsed < 3.0

    def test_follow_can_be_stopped_early_and_ends_on_quiet_run(self, handle: WorldHandle) -> None:
        world = handle.world
        world.append_batch(RUN, [ev(stepPath=f"s{i}") for i in range(5)])
        first_two = []
        for event in world.follow(RUN):  # no timeout: the caller breaks out
            first_two.append(event.sequence)
            if len(first_two) == 2:
                break
        assert first_two == [1, 2]
        started = time.monotonic()
        assert list(world.follow(RUN, after=5, timeout=0.1)) == []
        assert time.monotonic() - started < 2.0

    # -- the end seals the log ---------------------------------------------------------------

    def _ended_run(self, world: World, **end: Any) -> list[Event]:
        return world.append_batch(
            RUN,
            [
                ev("StepAttemptStarted", "start:s:1", stepPath="s"),
                EventInput(
                    type=end.get("type", "RunFailed"),
                    occurrence_id=end.get("occurrence_id", "run-end"),
                    payload={"error": {"causeCode": "cancelled", "message": "Run was cancelled."}},
                ),
            ],
        )

    def test_an_ended_run_takes_no_new_event_of_its_own(self, handle: WorldHandle) -> None:
        world = handle.world
        recorded = self._ended_run(world)
        late_commit = [
            ev("harness.tool_call.succeeded", "tool-done:s:1", stepPath="s"),
            ev("StepCompleted", "end:s:1", stepPath="s", output={"ok": True}),
        ]
        for attempt in (
            lambda: world.append_batch(RUN, late_commit),
            lambda: world.append(RUN, ev("StepScheduled", "schedule:t:1", stepPath="t")),
            lambda: world.append(RUN, ev("little.run.cancel_requested", None)),
        ):
            with pytest.raises(RunEndedError) as refused:
                attempt()
            assert isinstance(refused.value, LeaseLostError)  # a writer stops as on a lost lease
        assert world.last_sequence(RUN) == 2
        assert world.list_events(RUN) == recorded
        assert world.late_events(RUN) == []  # nothing refused carried model usage

    def test_what_an_ended_run_recorded_still_resolves(self, handle: WorldHandle) -> None:
        world = handle.world
        start, end = self._ended_run(world)
        again = EventInput(type="RunCompleted", occurrence_id="run-end", payload={})
        assert world.append(RUN, again) == end  # a run has one end
        assert world.append_batch(RUN, [ev("StepAttemptStarted", "start:s:1")]) == [start]
        with pytest.raises(RunEndedError):  # all or nothing: one new event refuses the batch
            world.append_batch(RUN, [ev("StepAttemptStarted", "start:s:1"), ev(stepPath="x")])
        assert world.last_sequence(RUN) == 2

    def test_an_end_without_the_engines_occurrence_id_seals_too(self, handle: WorldHandle) -> None:
        world = handle.world
        self._ended_run(world, type="RunCompleted", occurrence_id=None)
        with pytest.raises(RunEndedError):
            world.append(RUN, ev(stepPath="late"))
        assert world.last_sequence(RUN) == 2

    def test_observers_still_report_outcomes_on_an_ended_run(self, handle: WorldHandle) -> None:
        world = handle.world
        self._ended_run(world)
        outcome = world.append(RUN, ev("outcome.reported", "outcome:1", outcome="accepted"))
        assert outcome.sequence == 3
        with pytest.raises(RunEndedError):
            world.append_batch(RUN, [ev("outcome.reported", "outcome:2"), ev(stepPath="x")])

    def test_an_outer_loop_records_its_cycle_on_an_ended_run(self, handle: WorldHandle) -> None:
        # Upstream appends OuterLoopCycleCompleted to a cycle's run once the run has ended
        # and the supervisor decided: the sealed log still takes it, once.
        world = handle.world
        self._ended_run(world)
        cycle = ev(
            "OuterLoopCycleCompleted",
            "outer-loop:cycle:1",
            outerLoopId="ol_x",
            cycleNumber=1,
            supervise={"kind": "continue"},
        )
        recorded = world.append(RUN, cycle)
        assert recorded.sequence == 3
        assert world.append(RUN, cycle) == recorded
        with pytest.raises(RunEndedError):
            world.append_batch(RUN, [ev("OuterLoopCycleCompleted", "o:2"), ev(stepPath="x")])

    def test_a_refused_late_commit_keeps_its_model_usage_once(self, handle: WorldHandle) -> None:
        world = handle.world
        lease = world.acquire_lease(f"{{{RUN}}}:step:s", "attempt-1", 30)
        assert lease is not None
        self._ended_run(world)
        usage = {"inputTokens": 1200, "outputTokens": 80}
        response = ev(
            "harness.model.responded",
            "model-responded:s:1:0",
            stepPath="s",
            model={"provider": "openai", "modelId": "gpt-4o-mini"},
            response={"usage": usage},
        )
        commit = [response, ev("StepCompleted", "end:s:1", stepPath="s")]
        for _ in range(2):  # a commit sent again after a lost reply is kept once
            with pytest.raises(RunEndedError):  # (the end is checked before the fence)
                world.append_batch(RUN, commit, fence=lease.fence, release=True)
        late = world.late_events(RUN)
        assert [(e.run_id, e.type, e.occurrence_id) for e in late] == [
            (RUN, "harness.model.responded", "model-responded:s:1:0")
        ]
        assert late[0].payload == response.payload
        assert ISO_MILLIS.match(late[0].recorded_at)
        assert world.last_sequence(RUN) == 2
        assert "harness.model.responded" not in {e.type for e in world.list_events(RUN)}
        assert world.late_events("run_unknown_0001") == []
        # The commit released its lease all the same.
        assert world.acquire_lease(f"{{{RUN}}}:step:s", "attempt-2", 30) is not None

    def test_first_and_last_events_bound_the_log(self, handle: WorldHandle) -> None:
        world = handle.world
        assert world.first_and_last_events(RUN) is None
        (only,) = world.append_batch(RUN, [ev(stepPath="a")])
        assert world.first_and_last_events(RUN) == (only, only)
        recorded = world.append_batch(RUN, [ev(stepPath=f"s{i}") for i in range(3)])
        assert world.first_and_last_events(RUN) == (only, recorded[-1])
        with pytest.raises(InvalidIdError):
            world.first_and_last_events("not a run id")

    # -- wait_for_end -----------------------------------------------------------------------

    def test_wait_for_end_wakes_on_the_end_and_not_before(self, handle: WorldHandle) -> None:
        world = handle.world
        world.append(RUN, ev(stepPath="before"))
        woke: list[float] = []

        def waiter() -> None:
            woke.append(time.monotonic() if world.wait_for_end(RUN, timeout=20) else -1.0)

        thread = threading.Thread(target=waiter)
        thread.start()
        for index in range(3):  # events that are not the end do not wake it
            time.sleep(0.05)
            world.append(RUN, ev(stepPath=f"during-{index}"))
        time.sleep(0.2)
        assert woke == []
        ended = time.monotonic()
        world.append(RUN, EventInput(type="RunCompleted", payload={"output": None}))
        thread.join(10)
        assert len(woke) == 1 and woke[0] > 0
        assert woke[0] - ended < 2.0

    def test_wait_for_end_of_an_ended_run_returns_at_once(self, handle: WorldHandle) -> None:
        world = handle.world
        world.append_batch(
            RUN, [ev(stepPath="s"), EventInput(type="RunFailed", payload={"error": {}})]
        )
        with pytest.raises(RunEndedError):
            world.append(RUN, ev(stepPath="after the end"))  # (a late trace: refused)
        started = time.monotonic()
        assert world.wait_for_end(RUN, timeout=10) is True
        assert time.monotonic() - started < 1.0

    def test_wait_for_end_times_out_on_a_running_or_unknown_run(self, handle: WorldHandle) -> None:
        world = handle.world
        world.append(RUN, ev(stepPath="running"))
        for run_id in (RUN, "run_unknown_0001"):
            started = time.monotonic()
            assert world.wait_for_end(run_id, timeout=0.3) is False
            assert 0.3 <= time.monotonic() - started < 3.0
        with pytest.raises(InvalidIdError):
            world.wait_for_end("not a run id", timeout=0.1)

    # -- leases and fencing -----------------------------------------------------------------

    def test_the_first_submission_of_a_run_id_is_the_one_every_claim_answers(
        self, handle: WorldHandle
    ) -> None:
        world = handle.world
        assert world.claim_submission(RUN, _input_hash(1)) == _input_hash(1)
        assert world.claim_submission(RUN, _input_hash(2)) == _input_hash(1)
        assert world.claim_submission(RUN, _input_hash(1)) == _input_hash(1)
        assert world.claim_submission("run_other", _input_hash(2)) == _input_hash(2)
        with pytest.raises(InvalidInputError, match="input hash"):
            world.claim_submission(RUN, "sha256:nothex")
        with pytest.raises(InvalidIdError):
            world.claim_submission("run_x\n", _input_hash(1))
        # Threads claiming at once: one wins, all agree on it.
        barrier = threading.Barrier(8)
        answers: list[str] = []

        def claim(n: int) -> None:
            barrier.wait()
            answers.append(world.claim_submission("run_race", _input_hash(n)))

        threads = [threading.Thread(target=claim, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(set(answers)) == 1 and answers[0] in {_input_hash(n) for n in range(8)}

    def test_lease_is_exclusive_until_it_expires_and_tokens_grow(self, handle: WorldHandle) -> None:
        world = handle.world
        first = world.acquire_lease("attempt:a", "worker-1", 1.0)
        assert first is not None
        assert (first.key, first.holder) == ("attempt:a", "worker-1")
        # A lease's first tenure has token 1 (the fast path relies on it: a step whose lease
        # comes with token 1 was never run by anyone).
        assert first.token == 1
        assert world.acquire_lease("attempt:a", "worker-2", 1.0) is None
        # Re-acquiring what one holds is a renewal: same tenure, same token.
        again = world.acquire_lease("attempt:a", "worker-1", 1.0)
        assert again is not None and again.token == first.token
        handle.advance(1.5)
        second = world.acquire_lease("attempt:a", "worker-2", 1.0)
        assert second is not None and second.token > first.token
        world.release_lease(second)
        third = world.acquire_lease("attempt:a", "worker-3", 1.0)
        assert third is not None and third.token > second.token
        # A lease on another key is independent.
        other = world.acquire_lease("attempt:b", "worker-1", 1.0)
        assert other is not None

    def test_several_leases_are_taken_at_once_each_as_alone(self, handle: WorldHandle) -> None:
        world = handle.world
        held = world.acquire_lease("attempt:b", "other", 5.0)
        assert held is not None
        got = world.acquire_leases(
            [
                LeaseRequest("attempt:a", "me", 5.0),
                LeaseRequest("attempt:b", "me", 5.0),
                LeaseRequest("attempt:c", "me-too", 2.0),
            ]
        )
        assert [lease is not None for lease in got] == [True, False, True]
        first, _, third = got
        assert first is not None and (first.key, first.holder, first.token) == (
            "attempt:a",
            "me",
            1,
        )
        assert third is not None and (third.key, third.holder) == ("attempt:c", "me-too")
        assert world.acquire_lease("attempt:a", "someone", 5.0) is None
        assert world.acquire_leases([]) == []

    def test_fenced_append_after_takeover_is_refused_and_writes_nothing(
        self, handle: WorldHandle
    ) -> None:
        world = handle.world
        old = world.acquire_lease("attempt:a", "zombie", 1.0)
        assert old is not None
        landed = world.append(RUN, ev("StepAttemptStarted", stepPath="a"), fence=old.fence)
        assert landed.sequence == 1
        handle.advance(1.5)
        new = world.acquire_lease("attempt:a", "fresh", 5.0)
        assert new is not None and new.token > old.token
        with pytest.raises(LeaseLostError):
            world.append(RUN, ev("StepCompleted", stepPath="a"), fence=old.fence)
        with pytest.raises(LeaseLostError):
            world.append_batch(RUN, [ev(stepPath="x"), ev(stepPath="y")], fence=old.fence)
        assert world.last_sequence(RUN) == 1
        committed = world.append(RUN, ev("StepCompleted", stepPath="a"), fence=new.fence)
        assert committed.sequence == 2
        with pytest.raises(LeaseLostError):
            world.renew_lease(old, 5.0)
        # A stale holder's release does not free the new holder's lease.
        world.release_lease(old)
        assert world.acquire_lease("attempt:a", "third", 1.0) is None
        assert world.append(RUN, ev(stepPath="b"), fence=new.fence).sequence == 3

    def test_a_commit_can_take_the_next_lease_in_the_same_call(self, handle: WorldHandle) -> None:
        world = handle.world
        step = world.acquire_lease("step:a", "w1", 5.0)
        assert step is not None
        recorded, taken = world.append_batch_then_acquire(
            RUN,
            [ev("StepCompleted", "end:a:1", stepPath="a")],
            LeaseRequest("step:b", "w1", 5.0),
            fence=step.fence,
            release=True,
        )
        assert [e.type for e in recorded] == ["StepCompleted"]
        assert taken is not None and (taken.key, taken.holder, taken.token) == ("step:b", "w1", 1)
        assert world.acquire_lease("step:b", "w2", 5.0) is None
        assert world.acquire_lease("step:a", "w2", 5.0) is not None  # released by the commit
        # A refused append takes no lease.
        with pytest.raises(LeaseLostError):
            world.append_batch_then_acquire(
                RUN, [ev(stepPath="late")], LeaseRequest("step:c", "w1", 5.0), fence=step.fence
            )
        assert world.acquire_lease("step:c", "w2", 5.0) is not None
        assert [e.type for e in world.list_events(RUN)] == ["StepCompleted"]

    def test_a_commit_can_release_its_fence_in_the_same_call(self, handle: WorldHandle) -> None:
        world = handle.world
        lease = world.acquire_lease("attempt:a", "w", 5.0)
        assert lease is not None
        done = world.append_batch(
            RUN, [ev("StepCompleted", "end:a", stepPath="a")], fence=lease.fence, release=True
        )
        assert [e.sequence for e in done] == [1]
        again = world.acquire_lease("attempt:a", "next", 5.0)  # free at once, not at expiry
        assert again is not None and again.token > lease.token
        # A retried commit (already recorded) still releases; a stale fence frees nothing.
        assert (
            world.append_batch(
                RUN, [ev("StepCompleted", "end:a", stepPath="a")], fence=again.fence, release=True
            )
            == done
        )
        third = world.acquire_lease("attempt:a", "third", 5.0)
        assert third is not None
        with pytest.raises(LeaseLostError):
            world.append_batch(RUN, [ev(stepPath="b")], fence=again.fence, release=True)
        assert world.acquire_lease("attempt:a", "fourth", 5.0) is None  # third still holds it
        world.append_batch(RUN, [], fence=third.fence, release=True)  # nothing to write
        assert world.acquire_lease("attempt:a", "fifth", 5.0) is not None
        assert world.last_sequence(RUN) == 1

    def test_a_fence_of_another_holder_with_the_same_token_is_refused(
        self, handle: WorldHandle
    ) -> None:
        # A store that lost its last writes may hand a token out again, to another holder
        # (tests/test_world_redis_lost_tail.py does it to Redis): the token alone is not
        # enough to commit, nor to release the lease by a commit.
        world = handle.world
        lease = world.acquire_lease("attempt:a", "w", 5.0)
        assert lease is not None and lease.fence.holder == "w"
        stranger = Fence("attempt:a", lease.token, "someone-else")
        with pytest.raises(LeaseLostError):
            world.append(RUN, ev(stepPath="a"), fence=stranger)
        with pytest.raises(LeaseLostError):
            world.append_batch(RUN, [ev(stepPath="a")], fence=stranger, release=True)
        assert world.acquire_lease("attempt:a", "other", 5.0) is None  # still held by w
        assert world.append(RUN, ev(stepPath="a"), fence=lease.fence).sequence == 1

    def test_fence_on_an_expired_or_released_lease_is_refused(self, handle: WorldHandle) -> None:
        world = handle.world
        lease = world.acquire_lease("attempt:a", "w", 1.0)
        assert lease is not None
        handle.advance(1.5)  # expired, nobody took it: still not ours to write with
        with pytest.raises(LeaseLostError):
            world.append(RUN, ev(stepPath="a"), fence=lease.fence)
        with pytest.raises(LeaseLostError):
            world.renew_lease(lease, 1.0)
        fresh = world.acquire_lease("attempt:a", "w", 1.0)
        assert fresh is not None and fresh.token > lease.token
        world.release_lease(fresh)
        with pytest.raises(LeaseLostError):
            world.append(RUN, ev(stepPath="a"), fence=fresh.fence)
        with pytest.raises(LeaseLostError):
            world.append(RUN, ev(stepPath="a"), fence=Fence("never-taken", 1))
        assert world.last_sequence(RUN) == 0

    def test_renew_extends_a_held_lease(self, handle: WorldHandle) -> None:
        world = handle.world
        lease = world.acquire_lease("attempt:a", "w", 1.0)
        assert lease is not None
        handle.advance(0.6)
        renewed = world.renew_lease(lease, 1.0)
        assert renewed.token == lease.token
        assert renewed.expires_at > lease.expires_at
        handle.advance(0.6)  # past the first expiry, within the renewed one
        assert world.acquire_lease("attempt:a", "other", 1.0) is None
        assert world.append(RUN, ev(stepPath="a"), fence=renewed.fence).sequence == 1

    def test_lease_arguments_are_checked(self, handle: WorldHandle) -> None:
        world = handle.world
        for key, holder, ttl in (("", "w", 1.0), ("k", "", 1.0), ("k", "w", 0), ("k", "w", -1)):
            with pytest.raises(InvalidInputError):
                world.acquire_lease(key, holder, ttl)

    # -- artifacts --------------------------------------------------------------------------

    @pytest.mark.parametrize(
        ("payload", "encoding", "stored"),
        [
            ({"b": [1, 2.5, None], "a": "x"}, "json", b'{"a":"x","b":[1,2.5,null]}'),
            ([1, "two", {"three": 3}], "json", b'[1,"two",{"three":3}]'),
            (None, "json", b"null"),
            ("héllo ✓", "utf-8", "héllo ✓".encode()),
            ("", "utf-8", b""),
            (b"\xff\xfe\x00\x80 not utf-8", "binary", b"\xff\xfe\x00\x80 not utf-8"),
        ],
        ids=["object", "array", "null", "text", "empty-text", "non-utf8-bytes"],
    )
    def test_artifact_round_trips_byte_for_byte(
        self, handle: WorldHandle, payload: Any, encoding: str, stored: bytes
    ) -> None:
        content_type = "application/octet-stream" if encoding == "binary" else "application/json"
        manifest = handle.world.put_artifact(
            ArtifactInput(
                run_id=RUN, name="out", payload=payload, content_type=content_type, step_path="s"
            )
        )
        assert manifest.encoding == encoding
        assert manifest.sha256 == payload_sha256(stored)
        assert manifest.size_bytes == len(stored)
        assert manifest.artifact_ref == f"artifact://{manifest.artifact_id}"
        assert (manifest.run_id, manifest.step_path, manifest.name) == (RUN, "s", "out")
        assert ISO_MILLIS.match(manifest.created_at)
        read = handle.world.get_artifact(manifest.artifact_ref)
        assert read.manifest == manifest
        assert read.payload == payload
        assert type(read.payload) is type(payload)

    def test_large_binary_artifact_round_trips(self, handle: WorldHandle) -> None:
        data = bytes(range(256)) * (5 * 1024 * 1024 // 256)  # 5 MiB, every byte value
        manifest = handle.world.put_artifact(
            ArtifactInput(run_id=RUN, name="big", payload=data, content_type="application/zip")
        )
        assert manifest.size_bytes == len(data)
        assert handle.world.get_artifact(manifest.artifact_ref).payload == data

    @pytest.mark.parametrize("case", ARTIFACT_CASES, ids=lambda c: c["artifactId"])
    def test_artifact_ids_match_upstream(self, handle: WorldHandle, case: dict[str, Any]) -> None:
        given = case["input"]
        manifest = handle.world.put_artifact(
            ArtifactInput(
                run_id=given["runId"],
                name=given["name"],
                payload=given["payload"],
                content_type=given["contentType"],
                step_path=given.get("stepPath"),
            )
        )
        assert manifest.artifact_id == case["artifactId"]
        assert manifest.artifact_ref == case["artifactRef"]
        assert (manifest.sha256, manifest.size_bytes) == (case["payloadHash"], case["sizeBytes"])
        assert handle.world.get_artifact(case["artifactRef"]).payload == given["payload"]

    def test_same_content_is_stored_once(self, handle: WorldHandle) -> None:
        world = handle.world
        artifact = ArtifactInput(run_id=RUN, name="out", payload={"score": 98}, step_path="s")
        first = world.put_artifact(artifact)
        second = world.put_artifact(artifact)
        assert second == first  # the same artifact, created once (same createdAt)
        assert handle.blob_count() == 1
        # Another artifact with the same bytes has its own id but shares the blob.
        renamed = world.put_artifact(
            ArtifactInput(run_id="run_other", name="copy", payload={"score": 98})
        )
        assert renamed.artifact_id != first.artifact_id
        assert renamed.sha256 == first.sha256
        assert handle.blob_count() == 1
        world.put_artifact(
            ArtifactInput(run_id=RUN, name="out", payload={"score": 99}, step_path="s")
        )
        assert handle.blob_count() == 2

    def test_events_name_an_artifact_written_in_the_same_call(self, handle: WorldHandle) -> None:
        # An attempt's commit names its output artifact by the ref it will get
        # (artifact_ref_for) and writes both in one call; a second commit of the same
        # output writes nothing new and keeps the first artifact.
        world = handle.world
        output = ArtifactInput(run_id=RUN, name="output", payload={"n": 1}, step_path="f[a].w")
        ref = artifact_ref_for(output)
        recorded = world.append_batch_with_artifacts(
            RUN,
            [ev("ArtifactCreated", "artifact:f[a].w:1", artifactRef=ref), ev("StepCompleted")],
            [output],
        )
        assert [e.type for e in recorded] == ["ArtifactCreated", "StepCompleted"]
        read = world.get_artifact(ref)
        assert read.payload == {"n": 1}
        assert read.manifest.artifact_ref == ref == world.put_artifact(output).artifact_ref
        again = world.append_batch_with_artifacts(
            RUN, [ev("ArtifactCreated", "artifact:f[a].w:1", artifactRef=ref)], [output]
        )
        assert [e.sequence for e in again] == [recorded[0].sequence]
        assert world.get_artifact(ref).manifest == read.manifest
        assert handle.blob_count() == 1

    def test_an_artifact_written_with_a_fenced_append_is_there_when_the_lease_is_lost(
        self, handle: WorldHandle
    ) -> None:
        # The artifact goes first: an append refused for a lost lease may leave it behind
        # (unnamed), never an event naming an artifact that is missing.
        world = handle.world
        lease = world.acquire_lease(f"{{{RUN}}}:step:s", "me", 0.2)
        assert lease is not None
        handle.advance(0.5)
        assert world.acquire_lease(f"{{{RUN}}}:step:s", "other", 30) is not None
        output = ArtifactInput(run_id=RUN, name="output", payload=[1, 2], step_path="s")
        with pytest.raises(LeaseLostError):
            world.append_batch_with_artifacts(
                RUN, [ev("StepCompleted")], [output], fence=lease.fence
            )
        assert world.list_events(RUN) == []

    def test_unknown_or_malformed_artifact_refs(self, handle: WorldHandle) -> None:
        with pytest.raises(ArtifactNotFoundError):
            handle.world.get_artifact("artifact://art_0123456789abcdef")
        for bad in ("art_0123456789abcdef", "artifact://", "artifact://../x", "s3://art_1"):
            with pytest.raises(InvalidIdError):
                handle.world.get_artifact(bad)

    def test_artifact_payload_without_canonical_form_is_refused(self, handle: WorldHandle) -> None:
        with pytest.raises(InvalidInputError):
            handle.world.put_artifact(ArtifactInput(run_id=RUN, name="x", payload={"x": math.inf}))
        assert handle.blob_count() == 0

    # -- workflow versions ------------------------------------------------------------------

    def test_versions_are_immutable(self, handle: WorldHandle) -> None:
        world = handle.world
        document = {"id": "wfver_0123456789abcdef", "lwir": {"steps": [{"id": "a"}]}, "n": 1}
        world.register_version("wfver_0123456789abcdef", document)
        world.register_version("wfver_0123456789abcdef", dict(reversed(list(document.items()))))
        assert world.get_version("wfver_0123456789abcdef") == document
        with pytest.raises(ConflictError):
            world.register_version("wfver_0123456789abcdef", {**document, "n": 2})
        assert world.get_version("wfver_0123456789abcdef") == document
        # Readers get a copy: changing it changes nothing stored.
        world.get_version("wfver_0123456789abcdef")["n"] = 3
        assert world.get_version("wfver_0123456789abcdef")["n"] == 1
        with pytest.raises(VersionNotFoundError):
            world.get_version("wfver_ffffffffffffffff")
        for bad in ("", "wfver_", "../wfver_x", "wfver_a/b", "version"):
            with pytest.raises(InvalidIdError):
                world.register_version(bad, document)
            with pytest.raises(InvalidIdError):
                world.get_version(bad)
        assert canonical_json(world.get_version("wfver_0123456789abcdef")) == canonical_json(
            document
        )


@pytest.mark.slow
class CrossProcessConformance(_Fixtures):
    """Several real processes (``spawn``) on one world, reached through ``handle.spec``."""

    def test_processes_appending_to_one_run_get_contiguous_sequences(
        self, handle: WorldHandle
    ) -> None:
        assert handle.spec is not None, "cross-process worlds must give a spec"
        writers, per_writer = 8, 500
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(writers)
        errors = ctx.Queue()
        processes = [
            ctx.Process(
                target=_append_writer, args=(handle.spec, RUN, w, per_writer, barrier, errors)
            )
            for w in range(writers)
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=240)
        failures = []
        while not errors.empty():
            failures.append(errors.get())
        assert failures == []
        assert [p.exitcode for p in processes] == [0] * writers
        events = handle.world.list_events(RUN)
        assert len(events) == writers * per_writer
        _assert_contiguous(events, RUN)
        written = sorted((e.payload["writer"], e.payload["index"]) for e in events)
        assert written == [(w, i) for w in range(writers) for i in range(per_writer)]
        for writer in range(writers):  # each writer's own events stay in its order
            mine = [e.payload["index"] for e in events if e.payload["writer"] == writer]
            assert mine == list(range(per_writer))

    def test_processes_claiming_one_submission_agree_on_one(self, handle: WorldHandle) -> None:
        assert handle.spec is not None, "cross-process worlds must give a spec"
        claimers = 6
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(claimers)
        results = ctx.Queue()
        processes = [
            ctx.Process(target=_submission_claimer, args=(handle.spec, RUN, c, barrier, results))
            for c in range(claimers)
        ]
        for process in processes:
            process.start()
        answers = dict(results.get(timeout=240) for _ in range(claimers))
        for process in processes:
            process.join(timeout=60)
        assert [p.exitcode for p in processes] == [0] * claimers
        assert len(set(answers.values())) == 1
        winner = next(iter(answers.values()))
        assert winner in {_input_hash(c) for c in range(claimers)}
        assert handle.world.claim_submission(RUN, _input_hash(99)) == winner

    def test_processes_racing_the_same_occurrence_ids_record_each_once(
        self, handle: WorldHandle
    ) -> None:
        assert handle.spec is not None, "cross-process worlds must give a spec"
        racers = 4
        occurrence_ids = [f"occ-{i}" for i in range(40)]
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(racers)
        results = ctx.Queue()
        processes = [
            ctx.Process(
                target=_occurrence_racer,
                args=(handle.spec, RUN, r, occurrence_ids, barrier, results),
            )
            for r in range(racers)
        ]
        for process in processes:
            process.start()
        seen = dict(results.get(timeout=240) for _ in range(racers))
        for process in processes:
            process.join(timeout=60)
        assert [p.exitcode for p in processes] == [0] * racers
        events = handle.world.list_events(RUN)
        _assert_contiguous(events, RUN)
        assert sorted(e.occurrence_id or "" for e in events) == sorted(occurrence_ids)
        recorded = {e.occurrence_id: e.event_id for e in events}
        for racer in range(racers):  # every racer was handed the one recorded event
            assert seen[racer] == recorded
