"""A parallel group's branch records sorted for ``drive_parallel``, kept up to date cheaply.

Why: ``drive_parallel`` must know, on every call, which branches are unscheduled, in flight,
completed or failed. Reading 1000 records per call costs more than the rest of the call, and
between two calls the fold changed one or two of them.

How, exactly: the fold (``run_state._parallel``) stores each record under its own
``branch_path``, never moves or drops one, replaces a changed record in place with a new
object (same position in the mapping) and appends new ones; and it copies the group object
on write. So the next group's records are found by comparing its records, position by
position, by identity with the last group's (at C speed), and only the records that changed
are re-sorted. Whatever does not look like the fold's doing (a record under another key, a
shorter mapping...) is read from scratch.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping
from typing import Any, Final

from little_dist.run_state import ParallelBranchState
from little_dist.scheduling.policy import TERMINAL_CAUSES, cause_of

__all__ = ["ACTIVE", "COMPLETED", "FAILED", "UNSCHEDULED", "Walk", "record_kind"]

UNSCHEDULED: Final = 0
ACTIVE: Final = 1
COMPLETED: Final = 2
FAILED: Final = 3

# A walk's lists, by slot: one per kind but COMPLETED (only counted), then two failure lists.
_UNSCHEDULED_SLOT: Final = 0
_ACTIVE_SLOT: Final = 1
_FAILED_SLOT: Final = 2
_FLAGGED_SLOT: Final = 3
_TERMINAL_SLOT: Final = 4
_SLOT_OF_KIND: Final = {UNSCHEDULED: _UNSCHEDULED_SLOT, ACTIVE: _ACTIVE_SLOT, FAILED: _FAILED_SLOT}

# Above this many changed records a walk is re-sorted from scratch (cheaper than bisecting).
_INCREMENTAL_LIMIT: Final = 64
# Below this many records a changed range is compared element by element.
_SCAN_SPAN: Final = 32

# Slices of records are compared with ``==``, which is ``is`` for a type without ``__eq__``.
_RECORDS_COMPARE_BY_IDENTITY: Final = ParallelBranchState.__eq__ is object.__eq__


def record_kind(record: Any) -> int:
    """How ``drive_parallel`` treats a branch record: none, failed, completed, else in flight."""
    if record is None:
        return UNSCHEDULED
    status = record.status
    if status == "failed":
        return FAILED
    if status == "completed":
        return COMPLETED
    return ACTIVE


def _failure_slots(record: Any) -> tuple[int, ...]:
    """The extra lists a failed record is on: flagged (error not None), terminal."""
    error = record.error
    if error is None:
        return ()
    if cause_of(error) in TERMINAL_CAUSES:
        return (_FLAGGED_SLOT, _TERMINAL_SLOT)
    return (_FLAGGED_SLOT,)


def _changed_positions(new: list[Any], old: list[Any]) -> list[int]:
    """Positions ``< len(old)`` where ``new`` holds another object than ``old`` (ascending).

    Halves are compared with ``==`` (C speed, identity for records without ``__eq__``) and
    only unequal halves are searched further, so a few changes among 1000 cost a few dozen
    slice comparisons.
    """
    size = len(old)
    found: list[int] = []
    if not _RECORDS_COMPARE_BY_IDENTITY:
        return [i for i in range(size) if new[i] is not old[i]]
    stack = [(0, size)] if new[:size] != old else []
    while stack:
        low, high = stack.pop()
        if high - low <= _SCAN_SPAN:
            found.extend(i for i in range(low, high) if new[i] is not old[i])
            continue
        middle = (low + high) // 2
        if new[middle:high] != old[middle:high]:
            stack.append((middle, high))
        if new[low:middle] != old[low:middle]:
            stack.append((low, middle))
    return found


class Walk:
    """Branch records of one recorded group object (``source``), by branch index.

    ``unscheduled``, ``active`` (in flight), ``failed``, ``flagged`` (failed with an error
    that is not None: ``drive_parallel`` keeps the first such error) and ``terminal`` (failed
    with a terminal cause) are ascending branch indices; ``completed`` counts completed
    records and ``failures`` holds the failed ones by index. ``values`` is the source's
    records in mapping order and ``positions`` the position there of each in-flight branch's
    record, to find what the next group object changed (``trusted``: the mapping looked like
    the fold's). Never changed once built, so threads can share it.
    """

    __slots__ = (
        "completed",
        "failures",
        "lists",
        "positions",
        "source",
        "trusted",
        "values",
    )

    def __init__(
        self,
        source: Any,
        values: list[Any],
        positions: dict[int, int],
        lists: list[list[int]],
        completed: int,
        failures: dict[int, Any],
        trusted: bool,
    ) -> None:
        self.source = source
        self.values = values
        self.positions = positions
        self.lists = lists
        self.completed = completed
        self.failures = failures
        self.trusted = trusted

    @property
    def unscheduled(self) -> list[int]:
        return self.lists[_UNSCHEDULED_SLOT]

    @property
    def active(self) -> list[int]:
        return self.lists[_ACTIVE_SLOT]

    @property
    def failed(self) -> list[int]:
        return self.lists[_FAILED_SLOT]

    @property
    def flagged(self) -> list[int]:
        return self.lists[_FLAGGED_SLOT]

    @property
    def terminal(self) -> list[int]:
        return self.lists[_TERMINAL_SLOT]

    @classmethod
    def build(cls, group: Any, size: int, index_of: Mapping[str, int]) -> Walk:
        """Read every record of ``group`` (``None``: no group recorded) for the ``size``
        branches whose paths ``index_of`` maps to their index."""
        records: list[Any] = [None] * size
        where: dict[int, int] = {}
        values: list[Any] = []
        trusted = group is not None
        if group is not None:
            recorded: Mapping[str, Any] = group.branches
            values = list(recorded.values())
            for position, key in enumerate(recorded):
                record = values[position]
                if getattr(record, "branch_path", None) != key:
                    trusted = False
                index = index_of.get(key)
                if index is not None:
                    records[index] = record
                    where[index] = position
        lists: list[list[int]] = [[], [], [], [], []]
        completed = 0
        failures: dict[int, Any] = {}
        for index, record in enumerate(records):
            kind = record_kind(record)
            if kind == COMPLETED:
                completed += 1
                continue
            lists[_SLOT_OF_KIND[kind]].append(index)
            if kind == FAILED:
                failures[index] = record
                for slot in _failure_slots(record):
                    lists[slot].append(index)
        positions = {index: where[index] for index in lists[_ACTIVE_SLOT]}
        return cls(group, values, positions, lists, completed, failures, trusted)

    def follow(
        self, group: Any, size: int, index_of: Mapping[str, int], hint: Iterable[int] = ()
    ) -> Walk:
        """The walk of ``group``, the next recorded group object (see :meth:`build`;
        ``hint``: branch indices whose record probably changed)."""
        if group is None or self.source is None or not self.trusted:
            return Walk.build(group, size, index_of)
        recorded: Mapping[str, Any] = group.branches
        values = list(recorded.values())
        old = self.values
        known = len(old)
        if len(values) < known:
            return Walk.build(group, size, index_of)
        changed: list[tuple[int, int, Any, Any]] = []
        for position in [*self._moved(values, hint), *range(known, len(values))]:
            record = values[position]
            path = getattr(record, "branch_path", None)
            before = old[position] if position < known else None
            # The fold's shape: the record sits under its own path, where the old one sat.
            if not isinstance(path, str) or recorded.get(path) is not record:
                return Walk.build(group, size, index_of)
            if before is not None and path != before.branch_path:
                return Walk.build(group, size, index_of)
            index = index_of.get(path)
            if index is not None:
                changed.append((index, position, before, record))
        if len(changed) > _INCREMENTAL_LIMIT:
            return Walk.build(group, size, index_of)
        return self._resorted(group, values, changed)

    def _moved(self, values: list[Any], hint: Iterable[int]) -> list[int]:
        """Positions of our records whose record in ``values`` is another object.

        The fold changes in-flight records (and appends): so our records at some in-flight
        positions — those of the ``hint`` branches (the ones the last call settled), then all
        — are put back into a copy of ``values``, and if that copy then compares equal to ours
        (identity, at C speed) only those positions changed.
        """
        old = self.values
        known = len(old)
        if not _RECORDS_COMPARE_BY_IDENTITY:
            return _changed_positions(values, old)
        positions = self.positions
        hinted = [positions[index] for index in hint if index in positions]
        for spots in (hinted, positions.values()):
            probe = values[:known]
            moved: list[int] = []
            for position in spots:
                if probe[position] is not old[position]:
                    moved.append(position)
                    probe[position] = old[position]
            if probe == old:
                return moved
        return _changed_positions(values, old)

    def _resorted(
        self, source: Any, values: list[Any], changed: list[tuple[int, int, Any, Any]]
    ) -> Walk:
        if not changed:
            return Walk(
                source,
                values,
                self.positions,
                self.lists,
                self.completed,
                self.failures,
                True,
            )
        lists = list(self.lists)
        copied: set[int] = set()
        positions = dict(self.positions)
        completed = self.completed
        failures = self.failures

        def edit(slot: int) -> list[int]:
            if slot not in copied:
                lists[slot] = list(lists[slot])
                copied.add(slot)
            return lists[slot]

        for index, position, before, record in changed:
            old, new = record_kind(before), record_kind(record)
            if old == FAILED or new == FAILED:
                if failures is self.failures:
                    failures = dict(failures)
                failures.pop(index, None)
                for slot in (_FLAGGED_SLOT, _TERMINAL_SLOT):
                    _discard(edit(slot), index)
            if old != new:
                if old == COMPLETED:
                    completed -= 1
                else:
                    _discard(edit(_SLOT_OF_KIND[old]), index)
                if new == COMPLETED:
                    completed += 1
                else:
                    insort(edit(_SLOT_OF_KIND[new]), index)
            if new == FAILED:
                failures[index] = record
                for slot in _failure_slots(record):
                    insort(edit(slot), index)
            if new == ACTIVE:
                positions[index] = position
            else:
                positions.pop(index, None)
        return Walk(source, values, positions, lists, completed, failures, True)


def _discard(values: list[int], index: int) -> None:
    at = bisect_left(values, index)
    if at < len(values) and values[at] == index:
        del values[at]
