"""Per-run memory of a parallel step's branches, so ``decide`` skips what has not changed.

Why: ``decide`` runs after every commit, and on a wide parallel step (1000 branches, 100 in
flight) re-reading every branch record and re-driving every in-flight branch costs about a
millisecond per call, although between two calls only one or two branches changed.

What makes skipping sound: the fold is copy-on-write (see ``run_state._fold``) — once a
snapshot holds a step state or a parallel-group state, that object never changes; a change
makes a new object. A branch drive reads nothing but the views at the paths its scope can
read (:meth:`GroupCache.reads`: its steps' visits, and the parallel step's top-level needs
when it has decisions), the branch (its item) and the group's step plan and completed needs.
So when every one of those paths holds the *same object* (``is``; the objects are kept
alive here, never compared by ``id()`` alone) as after an earlier drive, within the same
resolved branch list and :class:`MemoKey`, and on the same run context (the cache lives on
it), the drive gives the same answer. A :class:`GroupCache` per run context and parallel
step attempt holds:

- :class:`BranchMemo` per branch: a drive that stayed quiet (no event, no overlay write,
  branch still in flight), the views it read and the dispatches it sent; a later call
  replays the dispatches instead of driving again. The single-path ones are also in a
  :class:`FastTable`, checked for all in-flight branches at once. Drives that emit events
  are never replayed, so no event payload is ever shared between calls (dispatches are
  frozen values).
- per completed branch, the result its last drive computed and the views it read, handed
  to the fan-in instead of re-reading the branch when those views are unchanged;
- the :class:`~little_dist.scheduling.walk.Walk` of the last recorded group object, and
  which branches the last call settled (where the next group object probably differs).

Thread-safety: several threads may decide with the same context. Memo entries, keys and
walks are immutable once stored; stores and removals take the cache's lock (so does reading
the fast table's three aligned lists), and other reads get an entry in one atomic dict or
attribute read, so a reader sees an old or a new one — both valid, since each is checked
against the state it is applied to.
"""

from __future__ import annotations

import threading
import weakref
from operator import itemgetter
from typing import Any, Final

from little_dist.scheduling.context import Branch, BranchResult, StepView
from little_dist.scheduling.env import Env
from little_dist.scheduling.step_graph import StepPlan, visit_path
from little_dist.scheduling.types import RunContext, StepDispatch
from little_dist.scheduling.walk import Walk

__all__ = [
    "NEVER",
    "BranchMemo",
    "FastTable",
    "GroupCache",
    "MemoKey",
    "Recording",
    "group_cache",
]

#: The view of a :class:`FastTable` slot without a memo: nothing a lookup returns ``is`` it.
NEVER: Final = object()


class MemoKey:
    """The group inputs every branch drive reads: the step plan and completed top-level
    needs. Interned per cache, so a memo's key is checked with one ``is``."""

    __slots__ = ("extra", "step")

    def __init__(self, step: StepPlan, extra: frozenset[str]) -> None:
        self.step = step
        self.extra = extra


class BranchMemo:
    """A quiet drive of one branch: the first path it looked up and the object it saw there
    (``more``: the other paths), and the dispatches it sent."""

    __slots__ = ("dispatch", "key", "more", "path", "view")

    def __init__(
        self,
        key: MemoKey,
        lookups: list[tuple[str, StepView | None]],
        dispatch: tuple[StepDispatch, ...],
    ) -> None:
        self.key = key
        self.path, self.view = lookups[0]
        self.more = tuple(lookups[1:])
        self.dispatch = dispatch

    def more_match(self, lookup: Any) -> bool:
        return all(lookup(path) is view for path, view in self.more)


class FastTable:
    """The memos of one key whose drive looked up a single path, by branch index, as three
    aligned lists — path, view, dispatches (``filler``, :data:`NEVER`, ``()`` when none: the
    filler is the parallel step's path, which the state has while it runs) — so the
    in-flight branches of a call are checked in a few C-level passes (see
    ``parallel._replay_active``).

    Only views that compare by identity are kept (list ``==`` then means ``is``). The three
    slots of a branch are written together under the cache's lock, and read under it too.
    """

    __slots__ = ("dispatch", "filler", "key", "paths", "views")

    def __init__(self, key: MemoKey, size: int, filler: str) -> None:
        self.key = key
        self.filler = filler
        self.paths: list[str] = [filler] * size
        self.views: list[Any] = [NEVER] * size
        self.dispatch: list[tuple[StepDispatch, ...]] = [()] * size

    def put(self, index: int, memo: BranchMemo | None) -> None:
        fast = memo is not None and not memo.more and type(memo.view).__eq__ is object.__eq__
        if memo is None or not fast:
            self.paths[index], self.views[index], self.dispatch[index] = self.filler, NEVER, ()
            return
        # The state's own key string, when the view carries it: dict lookups then match it
        # by identity, without comparing characters.
        path = getattr(memo.view, "step_path", None)
        self.paths[index] = path if path == memo.path else memo.path
        self.views[index] = memo.view
        self.dispatch[index] = memo.dispatch


class Recording:
    """Watches one branch drive: whether it emitted, sent or wrote anything, and afterwards
    what the paths its scope can read hold.

    Those paths (:meth:`GroupCache.reads`) cover every lookup a branch drive can make, so when
    the drive wrote no overlay entry their views after it are exactly its inputs.
    """

    __slots__ = ("_dispatch", "_emits", "_env", "_overlay", "_reads")

    def __init__(self, env: Env, reads: list[str]) -> None:
        self._env = env
        self._reads = reads
        self._emits = env.emit_calls
        self._dispatch = len(env.dispatch)
        self._overlay = len(env.overlay)

    def inputs(self) -> list[tuple[str, StepView | None]] | None:
        """What the drive read (``None`` when it wrote an overlay entry: then unknown)."""
        env = self._env
        if len(env.overlay) != self._overlay:
            return None
        lookup = env.lookup
        return [(path, lookup(path)) for path in self._reads]

    def quiet_dispatch(self) -> tuple[StepDispatch, ...] | None:
        """The dispatches sent, when the drive emitted no event and wrote no overlay entry."""
        if self._env.emit_calls != self._emits:
            return None
        return tuple(self._env.dispatch[self._dispatch :])


class GroupCache:
    """What one run context remembers of one parallel step attempt (see the module docs).

    ``memo`` maps branch index to its :class:`BranchMemo`.
    """

    __slots__ = (
        "_key",
        "_lock",
        "_suffixes",
        "_top",
        "branches",
        "hint",
        "index_of",
        "memo",
        "paths",
        "results",
        "step_path",
        "table",
        "walk",
    )

    def __init__(self, step: StepPlan, step_path: str, branches: list[Branch]) -> None:
        assert step.parallel is not None
        children = step.parallel.children
        # A branch drive reads its steps' visits, and the top-level steps the parallel step
        # needs when a decision's expression scope is built.
        self._suffixes = [
            visit_path(child.id, child.max_visits, visit)
            for child in children.steps
            for visit in range(child.max_visits)
        ]
        decides = any(child.uses == "decision" for child in children.steps)
        self._top = list(step.needs) if decides else []
        self.step_path = step_path
        self.branches = branches  # the context's resolved list (identity marks the attempt)
        self.paths = [branch.branch_path for branch in branches]
        self.index_of = {path: index for index, path in enumerate(self.paths)}
        self.memo: dict[int, BranchMemo] = {}
        self.results: dict[int, tuple[MemoKey, BranchResult, tuple[Any, ...]]] = {}
        self.walk: Walk | None = None
        # Branches the last call settled: their records are the ones likely to change next.
        self.hint: tuple[int, ...] = ()
        self.table: FastTable | None = None
        self._key: MemoKey | None = None
        self._lock = threading.Lock()

    def key_for(self, step: StepPlan, extra: frozenset[str]) -> MemoKey:
        key = self._key
        if key is None or key.step is not step or key.extra != extra:
            key = self._key = MemoKey(step, extra)
        return key

    def table_for(self, key: MemoKey) -> FastTable:
        table = self.table
        if table is None or table.key is not key:
            table = self.table = FastTable(key, len(self.paths), self.step_path)
        return table

    def walk_for(self, group: Any) -> Walk:
        """The walk of the recorded group object ``group`` (``None``: no group recorded)."""
        known = self.walk
        if known is not None and known.source is group:
            return known
        if known is None:
            walk = Walk.build(group, len(self.paths), self.index_of)
        else:
            walk = known.follow(group, len(self.paths), self.index_of, self.hint)
        self.walk = walk
        return walk

    def replay(self, env: Env, key: MemoKey, index: int) -> bool:
        """Replay the branch's remembered quiet drive if its inputs are the same objects."""
        memo = self.memo.get(index)
        if memo is None or memo.key is not key:
            return False
        lookup = env.lookup
        if lookup(memo.path) is not memo.view or (memo.more and not memo.more_match(lookup)):
            return False
        env.dispatch.extend(memo.dispatch)
        return True

    def reads(self, branch: Branch) -> list[str]:
        """Every path a drive of ``branch`` can look up (see :class:`Recording`)."""
        prefix = branch.branch_path + "."
        return [prefix + suffix for suffix in self._suffixes] + self._top

    def remember(self, recording: Recording, key: MemoKey, index: int) -> None:
        """Keep a drive that left the branch in flight and emitted nothing."""
        dispatch = recording.quiet_dispatch()
        inputs = recording.inputs() if dispatch is not None else None
        if dispatch is None or not inputs:
            return
        memo = BranchMemo(key, inputs, dispatch)
        table = self.table
        with self._lock:
            self.memo[index] = memo
            if table is not None and table.key is key:
                table.put(index, memo)

    def forget(self, index: int) -> None:
        """Drop the memo of a branch that settled (it is not driven again)."""
        if index in self.memo:
            table = self.table
            with self._lock:
                self.memo.pop(index, None)
                if table is not None:
                    table.put(index, None)

    def gather(
        self, table: FastTable, active: list[int]
    ) -> tuple[tuple[str, ...], tuple[Any, ...], tuple[tuple[StepDispatch, ...], ...]]:
        """The fast-table slots of ``active`` (two or more), read consistently (under the
        lock)."""
        pick = itemgetter(*active)
        with self._lock:
            return pick(table.paths), pick(table.views), pick(table.dispatch)

    def keep_result(
        self, recording: Recording, key: MemoKey, index: int, result: BranchResult
    ) -> None:
        """Keep the result of a drive that completed its branch, for the fan-in."""
        inputs = recording.inputs()
        if inputs is None:
            self.forget(index)
            return
        kept = (key, result, tuple(inputs))
        with self._lock:
            self.memo.pop(index, None)
            if self.table is not None:
                self.table.put(index, None)
            self.results[index] = kept

    def kept_result(self, env: Env, key: MemoKey, index: int, record: Any) -> BranchResult | None:
        """The kept result of a completed branch if what it read is unchanged and its record
        adds no other ``outputRef``: exactly what ``_settled_result`` would compute."""
        kept = self.results.get(index)
        if kept is None or kept[0] is not key:
            return None
        result = kept[1]
        if record.output_ref is not None and record.output_ref != result.output_ref:
            return None
        lookup = env.lookup
        if any(lookup(path) is not view for path, view in kept[2]):
            return None
        return result


# Group caches per run context (dropped with it), then per (parallel step path, attempt).
_caches: weakref.WeakKeyDictionary[RunContext, dict[tuple[str, int], GroupCache]] = (
    weakref.WeakKeyDictionary()
)
_caches_lock = threading.Lock()


def group_cache(
    ctx: RunContext, step: StepPlan, path: str, attempt: int, branches: list[Branch]
) -> GroupCache | None:
    """The cache of one parallel step attempt, or ``None`` when ``ctx.memoize`` is off."""
    if not ctx.memoize:
        return None
    per_run = _caches.get(ctx)
    found = per_run.get((path, attempt)) if per_run is not None else None
    if found is not None and found.branches is branches:
        return found
    with _caches_lock:
        per_run = _caches.get(ctx)
        if per_run is None:
            per_run = _caches[ctx] = {}
        found = per_run.get((path, attempt))
        if found is None or found.branches is not branches:
            found = per_run[(path, attempt)] = GroupCache(step, path, branches)
    return found
