"""One call's pass over a parallel group's branches: drive those in flight, schedule more.

Two walks with the same outcome (events, dispatches, counts): :func:`walk_all` reads every
branch record and drives every in-flight branch, every call (``RunContext.memoize`` off: the
reference); :func:`walk_changed` reads the records through the context's
:class:`~little_dist.scheduling.walk.Walk` and replays the quiet drives the
:class:`~little_dist.scheduling.branch_cache.GroupCache` remembers, so a call costs what changed
since the last one (plus C-level passes over the in-flight branches and the records).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import chain, compress, count
from operator import is_not, itemgetter
from typing import Any

from little_dist import occurrences
from little_dist.scheduling.branch import Group, drive_branch, is_terminal, record_branch_end
from little_dist.scheduling.branch_cache import NEVER, FastTable, GroupCache, MemoKey, Recording
from little_dist.scheduling.context import Branch, BranchResult, StepView
from little_dist.scheduling.env import Env
from little_dist.scheduling.walk import Walk

__all__ = ["Tally", "walk_all", "walk_changed"]

# A branch memo in use: the group's cache and this call's interned group inputs.
_Memo = tuple[GroupCache, MemoKey]


def _drive(
    env: Env, group: Group, branch: Branch, memo: _Memo | None, *, record: bool = True
) -> BranchResult | None:
    """Drive one branch; with a memo, replay its last quiet drive when nothing it read changed
    and (``record``) remember a new quiet one."""
    if memo is None:
        return drive_branch(env, group, branch)[1]
    cache, key = memo
    if cache.replay(env, key, branch.index):
        return None
    if not record:
        return drive_branch(env, group, branch)[1]
    return _drive_recorded(env, group, branch, memo)


def _drive_recorded(env: Env, group: Group, branch: Branch, memo: _Memo) -> BranchResult | None:
    """Drive one branch and keep what a later call can use: a quiet drive that left it in
    flight (to replay), or the result of one that completed it (for the fan-in)."""
    cache, key = memo
    recording = Recording(env, cache.reads(branch))
    result = drive_branch(env, group, branch)[1]
    if result is None:
        cache.remember(recording, key, branch.index)
    elif result.completed:
        cache.keep_result(recording, key, branch.index, result)
    else:
        cache.forget(branch.index)
    return result


@dataclass
class Tally:
    """One call's count of a group's branches: in flight, settled, and the failures that
    decide whether scheduling stops (the first one, and the first with a terminal cause, in
    branch order for branches already scheduled, then in the order new ones settle)."""

    in_flight: int = 0
    settled: int = 0
    fatal: Any = None
    first_failure: Any = None
    # The branch indices fatal and first_failure came from.
    fatal_at: int = -1
    first_failure_at: int = -1
    results: dict[int, BranchResult] = field(default_factory=dict)
    # The branches whose end this call recorded, in the order it recorded them (branch
    # order): the slots the call's new branches refill (see ``Claims``).
    ended: list[str] = field(default_factory=list)
    #: Their branch indices.
    ended_at: list[int] = field(default_factory=list)
    #: Under claims: whether a branch another owner completed is left to it (:func:`_leaving`).
    leave: Callable[[Branch], bool] | None = None
    # With the cache: the walk whose recorded failures are not in results yet, and the memo
    # that may hold the results of branches completed by earlier calls.
    recorded: Walk | None = None
    memo: _Memo | None = None

    def all_results(
        self, env: Env, branches: list[Branch], recorded: Mapping[str, Any]
    ) -> dict[int, BranchResult]:
        """``results`` plus the recorded failures and the kept results of recorded completed
        branches (wanted only for the fan-in; the rest ``_finish`` re-reads)."""
        results = self.results
        if self.recorded is not None:
            for index in self.recorded.failed:
                record = self.recorded.failures[index]
                branch = branches[index]
                results[index] = BranchResult(index, branch.item_key, False, error=record.error)
            self.recorded = None
        if self.memo is not None:
            cache, key = self.memo
            for branch in branches:
                if branch.index not in results:
                    record = recorded.get(branch.branch_path)
                    if record is not None and record.status == "completed":
                        kept = cache.kept_result(env, key, branch.index, record)
                        if kept is not None:
                            results[branch.index] = kept
        return results

    def settle(self, result: BranchResult) -> None:
        self.settled += 1
        self.results[result.index] = result
        if not result.completed:
            if self.first_failure is None:
                self.first_failure, self.first_failure_at = result.error, result.index
            if self.fatal is None and is_terminal(result.error):
                self.fatal, self.fatal_at = result.error, result.index

    def stopped(self, *, fail_fast: bool) -> bool:
        return self.fatal is not None or (fail_fast and self.first_failure is not None)


def _advance(
    env: Env,
    group: Group,
    branch: Branch,
    result: BranchResult | None,
    tally: Tally,
    *,
    quiet: bool = False,
) -> None:
    """Count a driven branch: in flight, or ended (recorded). ``quiet``: its drive emitted
    nothing (what ended it, if anything, is in the log: a commit)."""
    if result is None or (
        # Under claims, a branch another owner's commit completed is that owner's to record
        # and refill (its lane's next branch): in flight until then. (One this call's own
        # events completed, deciding a step inline, say, is nobody else's.)
        quiet and result.completed and tally.leave is not None and tally.leave(branch)
    ):
        tally.in_flight += 1
    else:
        record_branch_end(env, group, branch, result)
        tally.ended.append(branch.branch_path)
        tally.ended_at.append(branch.index)
        tally.settle(result)


def _window(env: Env, group: Group) -> int:
    """How many of the group's branches may be in flight: its ``maxConcurrency``, or the
    engine's ``max_in_flight`` when lower."""
    config = group.step.parallel
    assert config is not None
    declared = config.max_concurrency
    cap = env.ctx.max_in_flight
    return declared if cap is None or cap >= declared else max(cap, 1)


def _leaving(env: Env, group: Group, unscheduled: list[int]) -> Callable[[Branch], bool] | None:
    """Under claims, which completed branches this call leaves to their owners: those another
    owner's commit completed whose lane has a next branch to refill it with. One whose lane
    is done is recorded by any look: nothing can be chosen twice for it, and the look after
    the last commit (which sees every commit) must be able to end the group."""
    claims = env.claims
    if claims is None or not unscheduled:
        return None
    own = claims.own_ends
    window = _window(env, group)

    def leave(branch: Branch) -> bool:
        return (
            branch.branch_path not in own
            and _lane_refill(unscheduled, branch.index, window, _NONE_TAKEN) is not None
        )

    return leave


_NONE_TAKEN: frozenset[int] = frozenset()


def _schedule(
    env: Env,
    group: Group,
    unscheduled: list[int],
    tally: Tally,
    memo: _Memo | None,
    active: list[int],
) -> None:
    """Schedule unscheduled branches (``unscheduled``: their ascending indices) while below
    ``maxConcurrency`` (and the engine's ``max_in_flight``): in item order, or under
    ``env.claims`` in lanes (:func:`_claimed`). ``active``: the indices of the branches the
    state has in flight. The branches ``max_in_flight`` alone keeps back are counted in
    ``env.held_back``.
    """
    config = group.step.parallel
    assert config is not None
    fail_fast = config.failure_mode == "fail_fast"
    declared = config.max_concurrency
    window = _window(env, group)
    chosen: Iterator[tuple[int, bool]] = (
        ((index, False) for index in unscheduled)
        if env.claims is None
        else _claimed(env, group, unscheduled, tally, window, active)
    )
    scheduled = 0
    branches = group.branches
    # (the next branch is asked for only while there is room: _claimed's last part, the
    # room an earlier decision left, costs a pass over the lanes in flight)
    while not tally.stopped(fail_fast=fail_fast) and tally.in_flight < window:
        found = next(chosen, None)
        if found is None:
            break
        index, theirs = found
        scheduled += 1
        branch = branches[index]
        if theirs:
            env.left.append(branch.branch_path)
            tally.in_flight += 1
            continue
        env.emit(
            "ParallelBranchScheduled",
            {
                **group.base(),
                "branchPath": branch.branch_path,
                "itemKey": branch.item_key,
                "branchIndex": branch.index,
            },
            occurrences.branch_scheduled(branch.branch_path),
        )
        # A branch scheduled now schedules its first steps (events): not worth recording.
        _advance(env, group, branch, _drive(env, group, branch, memo, record=False), tally)
    if window < declared and not tally.stopped(fail_fast=fail_fast):
        room = declared - max(tally.in_flight, window)
        env.held_back += max(0, min(len(unscheduled) - scheduled, room))


def _claimed(
    env: Env,
    group: Group,
    unscheduled: list[int],
    tally: Tally,
    window: int,
    active: list[int],
) -> Iterator[tuple[int, bool]]:
    """Under claims, the branches to schedule in turn, each with whether it is another
    owner's (left: see :class:`~little_dist.scheduling.types.Claims`).

    Branch ``i`` is in lane ``i mod window``, and the end of a branch is refilled with the
    next unscheduled branch of its lane (:func:`_lane_refill`), so processes refilling their
    own ends at once choose different branches whatever else their views of the log hold (in
    item order, both would choose the lowest unscheduled). In turn: the branches an earlier
    round of the caller left, still unscheduled (theirs); each end this call records, refilled
    in its lane (the end's owner's); then room an earlier decision left (anyone's), in item
    order among the lanes with nothing in flight.
    """
    claims = env.claims
    assert claims is not None
    branches = group.branches
    taken: set[int] = set()
    if claims.left:
        for index in unscheduled:  # (left branches are refills: near the lowest unscheduled)
            if branches[index].branch_path in claims.left:
                taken.add(index)
                yield index, True
                if len(taken) == len(claims.left):
                    break
    for path, at in list(zip(tally.ended, tally.ended_at, strict=True)):
        refill = _lane_refill(unscheduled, at, window, taken)
        if refill is not None:  # (else its lane is done: the room is anyone's)
            taken.add(refill)
            yield refill, path not in claims.own_ends
    ended = set(tally.ended_at)
    busy = {index % window for index in active if index not in ended}
    busy.update(index % window for index in taken)
    seen: set[int] = set()
    for index in unscheduled:  # (each lane's lowest unscheduled branch, until all are seen)
        lane = index % window
        if lane in seen:
            continue
        seen.add(lane)
        if lane not in busy:
            busy.add(lane)
            yield index, False
        if len(seen) == window or len(busy) == window:
            return


def _lane_refill(
    unscheduled: list[int], ended: int, window: int, taken: AbstractSet[int]
) -> int | None:
    """The first unscheduled branch after branch ``ended`` in its lane (indices equal modulo
    ``window``) and not ``taken``; ``None`` if there is none."""
    candidate = ended + window
    while True:
        at = bisect_left(unscheduled, candidate)
        if at == len(unscheduled):
            return None
        found = unscheduled[at]
        step = (ended - found) % window
        if step == 0 and found not in taken:
            return found
        candidate = found + (step or window)


def walk_all(env: Env, group: Group, recorded: Mapping[str, Any]) -> Tally:
    """Every branch, every call: the reference walk (``RunContext.memoize`` off)."""
    tally = Tally()
    branches = group.branches
    known = [recorded.get(branch.branch_path) for branch in branches]
    unscheduled = [b.index for b, record in zip(branches, known, strict=True) if record is None]
    tally.leave = _leaving(env, group, unscheduled)
    active: list[int] = []
    for branch, record in zip(branches, known, strict=True):
        if record is None:
            continue
        if record.status == "failed":
            tally.settle(BranchResult(branch.index, branch.item_key, False, error=record.error))
        elif record.status == "completed":
            tally.settled += 1
        else:
            active.append(branch.index)
            emits = env.emit_calls
            result = _drive(env, group, branch, None)
            _advance(env, group, branch, result, tally, quiet=env.emit_calls == emits)
    _schedule(env, group, unscheduled, tally, None, active)
    return tally


def _views_at(env: Env, paths: tuple[str, ...]) -> tuple[StepView | None, ...]:
    """What ``env.lookup`` gives for each of ``paths`` (two or more), subscripting the
    state's steps at C speed when no overlay is in the way (empty table slots name the
    parallel step itself, which the state has)."""
    if env.overlay:
        return tuple(map(env.lookup, paths))
    steps = env.state.steps
    try:
        found: tuple[StepView | None, ...] = itemgetter(*paths)(steps)
    except KeyError:
        return tuple(map(steps.get, paths))
    return found


def _replay_active(
    env: Env, group: Group, active: list[int], memo: _Memo, table: FastTable, tally: Tally
) -> None:
    """Drive the in-flight branches ``active`` in order, replaying the unchanged ones.

    The fast table is read in C-level passes: every branch's remembered path is looked up at
    once and compared with the remembered view; only the mismatches (changed, or without a
    single-path memo) go through :func:`_drive`, between runs of replayed dispatches.
    """
    if len(active) < 2:  # nothing to gain from the table
        for index in active:
            branch = group.branches[index]
            emits = env.emit_calls
            result = _drive(env, group, branch, memo)
            _advance(env, group, branch, result, tally, quiet=env.emit_calls == emits)
        return
    cache = memo[0]
    paths, views, dispatches = cache.gather(table, active)
    # A branch only reads its own paths and top-level steps, and only writes its own paths in
    # the overlay: with no overlay at the start, the state's steps answer every check.
    now = _views_at(env, paths)
    dirty: Iterable[int] = () if now == views else compress(count(), map(is_not, now, views))
    extend = env.dispatch.extend
    branches = group.branches
    start = 0
    for position in dirty:
        if position > start:
            extend(chain.from_iterable(dispatches[start:position]))
            tally.in_flight += position - start
        branch = branches[active[position]]
        emits = env.emit_calls
        if views[position] is NEVER:  # no fast entry: maybe a memo of several paths
            result = _drive(env, group, branch, memo)
        else:
            result = _drive_recorded(env, group, branch, memo)
        _advance(env, group, branch, result, tally, quiet=env.emit_calls == emits)
        start = position + 1
    if start < len(active):
        extend(chain.from_iterable(dispatches[start:]))
        tally.in_flight += len(active) - start


def walk_changed(env: Env, group: Group, cache: GroupCache, recorded_group: Any) -> Tally:
    """The same walk over the cache's sorted records: only in-flight branches are visited
    (replayed when unchanged); recorded failures are read from the sorted lists."""
    walk = cache.walk_for(recorded_group)
    tally = Tally(leave=_leaving(env, group, walk.unscheduled))
    key = cache.key_for(group.step, group.extra)
    table = cache.table_for(key)
    _replay_active(env, group, walk.active, (cache, key), table, tally)
    # _walk_all settles recorded failures and in-flight branches in one pass in branch order,
    # keeping the first error that is not None and the first terminal one: the lowest index
    # among the recorded ones (flagged, terminal) and the in-flight ones that settled now.
    tally.recorded = walk
    tally.memo = (cache, key)
    tally.settled += walk.completed + len(walk.failed)
    if walk.flagged and (tally.first_failure is None or walk.flagged[0] < tally.first_failure_at):
        tally.first_failure_at = walk.flagged[0]
        tally.first_failure = walk.failures[tally.first_failure_at].error
    if walk.terminal and (tally.fatal is None or walk.terminal[0] < tally.fatal_at):
        tally.fatal_at = walk.terminal[0]
        tally.fatal = walk.failures[tally.fatal_at].error
    _schedule(env, group, walk.unscheduled, tally, (cache, key), walk.active)
    cache.hint = tuple(tally.results)
    return tally
