"""A step's expression scope, its resolved input, a parallel step's branches and its fan-in.

Upstream's ``expressionContextFor`` / ``resolveStepInput`` / ``parallelBranchesFor`` /
``parallelFanInOutput``, pure and over a folded :class:`~little_dist.run_state.RunState`
(``little_dist.step_context`` is the public face). The context roots are:

- ``input``: the run input; ``item``: the branch's item (present only inside a branch);
- ``step``: the LWIR step object; ``workflow``: the LWIR document;
- ``steps``: completed steps of the scope by id, ``{"output": ...}`` for single-visit steps
  and ``{"output": <last visit>, "visits": [...]}`` for loop steps (which is what
  ``lastOutput`` / ``allVisits`` read). Inside a branch: the branch's own steps plus the
  completed top-level steps the parallel step ``needs``.

Outputs stored only as artifacts (``outputRef`` without an inline ``output``) are read with
the optional ``load_output(ref)`` callable; without one such a step reads as ``{}``. Scopes
are read by looking up the paths the LWIR's steps can have, never by scanning every path of
the run, and only for the steps an expression names (``steps`` is read on demand:
:class:`StepOutputs`), so resolving a step's input costs what it reads, not the run's size.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from little_dist.errors import InvalidInputError, NotFoundError
from little_dist.expressions import UNDEFINED, ExpressionError, resolve_value
from little_dist.run_state import RunState
from little_dist.scheduling.step_graph import (
    ParallelPlan,
    ScopePlan,
    StepPlan,
    WorkflowPlan,
    branch_path_for,
    plan_for,
)
from little_dist.scheduling.types import RunContext

__all__ = [
    "Branch",
    "BranchResolutionError",
    "BranchResult",
    "OutputLoader",
    "StepLocation",
    "StepLookup",
    "StepOutputs",
    "StepPathError",
    "StepView",
    "branches_of",
    "build_context",
    "expression_context",
    "fan_in_output",
    "locate_step",
    "resolve_branches",
    "resolve_step_config",
    "resolve_step_input",
    "scope_steps_root",
]

OutputLoader = Callable[[str], Any]


class StepView(Protocol):
    """What the scheduler reads of a step's folded state (a ``StepState`` or a stand-in)."""

    @property
    def status(self) -> str: ...

    @property
    def has_output(self) -> bool: ...

    @property
    def output(self) -> Any: ...

    @property
    def output_ref(self) -> str | None: ...

    @property
    def error(self) -> Any: ...

    @property
    def attempts(self) -> Sequence[Any]: ...

    @property
    def artifact_refs(self) -> Sequence[str]: ...


StepLookup = Callable[[str], StepView | None]


class StepPathError(NotFoundError):
    """A step path that names no step of the workflow."""


class BranchResolutionError(InvalidInputError):
    """A parallel step's ``items``/``itemKey`` do not give a usable branch list."""


@dataclass(frozen=True)
class Branch:
    """One branch of a parallel step attempt (upstream's ``ParallelBranch``)."""

    index: int
    item: Any
    item_key: str
    branch_path: str


@dataclass(frozen=True)
class BranchResult:
    """A settled branch, as the fan-in sees it."""

    index: int
    item_key: str
    completed: bool
    output: Any = UNDEFINED
    output_ref: str | None = None
    error: Any = None
    artifacts: tuple[str, ...] = ()


@dataclass(frozen=True)
class StepLocation:
    """Where a step path points: the step, and its branch when inside a parallel step."""

    step: StepPlan
    scope: ScopePlan
    prefix: str
    visit: int
    parallel: StepPlan | None = None
    parallel_path: str | None = None
    attempt: int = 1
    branch_path: str | None = None


_TOP: Final = re.compile(r"^([^.\[\]@]+)(?:\.visit\[(\d+)\])?$")
_BRANCH: Final = re.compile(
    r"^([^.\[\]@]+)(?:@attempt_(\d+))?\[([^\]]*)\]\.([^.\[\]@]+)(?:\.visit\[(\d+)\])?$"
)


def locate_step(plan: WorkflowPlan, step_path: str) -> StepLocation:
    """Parse ``step_path`` against the plan; :class:`StepPathError` when it names no step."""
    top = _TOP.fullmatch(step_path)
    if top is not None:
        step = plan.top.by_id.get(top.group(1))
        if step is not None and (top.group(2) is not None) == step.multi_visit:
            return StepLocation(step, plan.top, "", int(top.group(2) or 0))
    branch = _BRANCH.fullmatch(step_path)
    if branch is not None:
        parent = plan.top.by_id.get(branch.group(1))
        if parent is not None and parent.parallel is not None:
            children = parent.parallel.children
            child = children.by_id.get(branch.group(4))
            if child is not None and (branch.group(5) is not None) == child.multi_visit:
                attempt = int(branch.group(2) or 1)
                branch_path = step_path[: branch.end(3) + 1]
                return StepLocation(
                    child,
                    children,
                    branch_path + ".",
                    int(branch.group(5) or 0),
                    parent,
                    parent.id,
                    attempt,
                    branch_path,
                )
    raise StepPathError(f"No step of workflow version {plan.version_id} has the path {step_path!r}")


def _envelope(view: StepView, load_output: OutputLoader | None) -> dict[str, Any]:
    if view.has_output:
        return {"output": view.output}
    if view.output_ref is not None and load_output is not None:
        return {"output": load_output(view.output_ref)}
    return {}


def _output_value(view: StepView, load_output: OutputLoader | None) -> Any:
    return _envelope(view, load_output).get("output", UNDEFINED)


def scope_steps_root(
    scope: ScopePlan,
    prefix: str,
    lookup: StepLookup,
    load_output: OutputLoader | None = None,
    *,
    allowed_top: Sequence[str] = (),
    top_lookup: StepLookup | None = None,
) -> Mapping[str, Any]:
    """Upstream's ``stepOutputs`` for one scope: completed steps by id, loops aggregated.

    Read on demand (:class:`StepOutputs`): an expression names each step it reads (``steps``
    is never a value on its own), so a step's input costs the steps it names, not every
    completed step before it (a chain of N steps would otherwise cost O(N) per step, and
    load every earlier output stored as an artifact)."""
    return StepOutputs(scope, prefix, lookup, load_output, tuple(allowed_top), top_lookup)


_ABSENT: Final = object()


class StepOutputs(Mapping[str, Any]):
    """:func:`scope_steps_root`'s mapping: each step's entry is built (and its output loaded)
    the first time it is read, then kept; iterating builds them all, in upstream's order."""

    __slots__ = ("_allowed_top", "_entries", "_load", "_lookup", "_prefix", "_scope", "_top")

    def __init__(
        self,
        scope: ScopePlan,
        prefix: str,
        lookup: StepLookup,
        load_output: OutputLoader | None,
        allowed_top: tuple[str, ...],
        top_lookup: StepLookup | None,
    ) -> None:
        self._scope, self._prefix, self._lookup, self._load = scope, prefix, lookup, load_output
        self._allowed_top, self._top = allowed_top, top_lookup
        self._entries: dict[str, Any] = {}

    def __getitem__(self, step_id: str) -> Any:
        entry = self._entries.get(step_id, _ABSENT) if type(step_id) is str else _ABSENT
        if entry is _ABSENT:
            entry = self._entries[step_id] = self._entry(step_id)
        if entry is _ABSENT:
            raise KeyError(step_id)
        return entry

    def _entry(self, step_id: str) -> Any:
        step = self._scope.by_id.get(step_id)
        if step is not None:
            entry = _scope_entry(step, self._prefix, self._lookup, self._load)
            if entry is not _ABSENT:
                return entry
        if self._top is not None and step_id in self._allowed_top:
            view = self._top(step_id)
            if view is not None and view.status == "completed":
                return _envelope(view, self._load)
        return _ABSENT

    def _all(self) -> dict[str, Any]:
        ids = dict.fromkeys(self._allowed_top if self._top is not None else ())
        ids.update(dict.fromkeys(step.id for step in self._scope.steps))
        return {step_id: self[step_id] for step_id in ids if step_id in self}

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __repr__(self) -> str:
        return f"StepOutputs({self._all()!r})"


def _scope_entry(
    step: StepPlan, prefix: str, lookup: StepLookup, load_output: OutputLoader | None
) -> Any:
    """The ``steps`` entry of ``step`` in its scope, or ``_ABSENT`` (not completed)."""
    if not step.multi_visit:
        view = lookup(prefix + step.id)
        if view is not None and view.status == "completed":
            return _envelope(view, load_output)
        return _ABSENT
    visits: list[Any] = []
    for index in range(step.max_visits):
        view = lookup(step.path(prefix, index))
        # Visit n exists only once visit n-1 completed: stop at the first gap or open visit.
        if view is None or view.status != "completed":
            break
        visits.append(_output_value(view, load_output))
    return {"output": visits[-1], "visits": visits} if visits else _ABSENT


def build_context(
    lwir: Mapping[str, Any],
    run_input: Any,
    step: StepPlan,
    steps: Mapping[str, Any],
    item: tuple[bool, Any] = (False, None),
) -> dict[str, Any]:
    """The expression context of ``step`` (``item`` only when ``item[0]``)."""
    context: dict[str, Any] = {
        "input": run_input,
        "step": step.raw,
        "workflow": lwir,
        "steps": steps,
    }
    if item[0]:
        context["item"] = item[1]
    return context


def resolve_branches(
    plan: WorkflowPlan,
    parallel_step: StepPlan,
    step_path: str,
    attempt: int,
    context: Mapping[str, Any],
    *,
    max_branches_cap: int | None = None,
) -> list[Branch]:
    """Upstream's ``parallelBranchesFor``; raises :class:`BranchResolutionError`."""
    config = parallel_step.parallel
    assert config is not None
    step_id = parallel_step.id
    try:
        items = resolve_value(config.items, context)
    except ExpressionError as exc:
        raise BranchResolutionError(str(exc)) from exc
    if not isinstance(items, list):
        raise BranchResolutionError(
            f"Parallel step '{step_id}' items expression must resolve to an array."
        )
    limit = branch_limit(config, max_branches_cap)
    if len(items) > limit:
        raise BranchResolutionError(
            f"Parallel step '{step_id}' resolved {len(items)} item(s), exceeding maxBranches "
            f"{limit}."
        )
    keys: set[str] = set()
    branches: list[Branch] = []
    item_context = dict(context)
    for index, item in enumerate(items):
        item_context["item"] = item
        try:
            key = resolve_value(config.item_key, item_context)
        except ExpressionError as exc:
            raise BranchResolutionError(str(exc)) from exc
        if type(key) is not str or not key:
            raise BranchResolutionError(
                f"Parallel step '{step_id}' itemKey must resolve to a non-empty string."
            )
        if key in keys:
            raise BranchResolutionError(f"Duplicate itemKey '{key}' in parallel step '{step_id}'.")
        keys.add(key)
        try:
            branch_path = branch_path_for(step_path, attempt, key)
        except UnicodeEncodeError as exc:  # a lone surrogate: JS's encodeURIComponent throws too
            raise BranchResolutionError(
                f"Parallel step '{step_id}' itemKey is not URI-encodable."
            ) from exc
        branches.append(Branch(index, item, key, branch_path))
    return branches


# Resolved branch lists per run context (built once per context, dropped with it): a
# parallel step's items and keys are settled once it starts.
_branch_cache: weakref.WeakKeyDictionary[RunContext, dict[tuple[str, int], list[Branch]]] = (
    weakref.WeakKeyDictionary()
)


def branches_of(
    ctx: RunContext,
    plan: WorkflowPlan,
    parallel_step: StepPlan,
    step_path: str,
    attempt: int,
    context: Callable[[], Mapping[str, Any]],
) -> list[Branch]:
    """:func:`resolve_branches` of one parallel step attempt, once per run context
    (``context`` builds the expression scope it resolves in, when it must)."""
    per_run = _branch_cache.get(ctx)
    if per_run is None:
        per_run = _branch_cache.setdefault(ctx, {})
    found = per_run.get((step_path, attempt))
    if found is None:
        found = resolve_branches(
            plan,
            parallel_step,
            step_path,
            attempt,
            context(),
            max_branches_cap=ctx.max_branches_cap,
        )
        per_run[(step_path, attempt)] = found
    return found


def branch_limit(config: ParallelPlan, max_branches_cap: int | None) -> int:
    """``maxBranches``, raised to the engine's cap for steps declaring the LWIR ceiling."""
    from little_dist.scheduling.step_graph import ALPHA_MAX_BRANCHES

    if max_branches_cap is not None and config.max_branches >= ALPHA_MAX_BRANCHES:
        return max(config.max_branches, max_branches_cap)
    return config.max_branches


def _utf16(text: str) -> bytes:
    return text.encode("utf-16-be", "surrogatepass")


def fan_in_output(order: str, results: Sequence[BranchResult]) -> list[dict[str, Any]]:
    """Upstream's ``parallelFanInOutput`` for ``all_settled`` or an all-completed group.

    ``order == "itemKey"`` sorts by item key as JavaScript's ``<`` does (UTF-16 code units);
    otherwise branches keep the order of the resolved items.
    """
    if order == "itemKey":
        ordered = sorted(results, key=lambda result: _utf16(result.item_key))
    else:
        ordered = sorted(results, key=lambda result: result.index)
    envelopes: list[dict[str, Any]] = []
    for result in ordered:
        if not result.completed:
            envelopes.append(
                {
                    "itemKey": result.item_key,
                    "status": "failed",
                    "error": result.error,
                    "artifacts": list(result.artifacts),
                }
            )
            continue
        envelope: dict[str, Any] = {"itemKey": result.item_key, "status": "completed"}
        if result.output is not UNDEFINED:
            envelope["output"] = result.output
        if result.output_ref is not None:
            envelope["outputRef"] = result.output_ref
        envelope["artifacts"] = list(result.artifacts)
        envelopes.append(envelope)
    return envelopes


# -- the public, state-based entry points ------------------------------------------------


def _state_lookup(state: RunState) -> StepLookup:
    steps = state.steps
    return steps.get


def _branch_item(
    ctx: RunContext, plan: WorkflowPlan, state: RunState, where: StepLocation, lookup: StepLookup
) -> Any:
    """The item of the branch ``where`` is in: by the recorded branch index when possible."""
    assert where.parallel is not None and where.parallel_path is not None
    parent_context = build_context(
        plan.lwir,
        ctx.run_input,
        where.parallel,
        scope_steps_root(plan.top, "", lookup),
    )
    group = state.parallel_groups.get(where.parallel_path)
    recorded = group.branches.get(where.branch_path or "") if group is not None else None
    if recorded is not None and recorded.branch_index is not None:
        try:
            items = resolve_value(where.parallel.parallel.items, parent_context)  # type: ignore[union-attr]
        except ExpressionError as exc:
            raise BranchResolutionError(str(exc)) from exc
        if isinstance(items, list) and recorded.branch_index < len(items):
            return items[recorded.branch_index]
    # Not recorded yet (a refill that runs before its ParallelBranchScheduled is appended):
    # the branch list decide resolved for this context, not a fresh one per branch.
    branches = branches_of(
        ctx, plan, where.parallel, where.parallel_path, where.attempt, lambda: parent_context
    )
    for branch in branches:
        if branch.branch_path == where.branch_path:
            return branch.item
    raise StepPathError(f"No branch of '{where.parallel_path}' has the path {where.branch_path!r}")


def _context_at(
    ctx: RunContext, state: RunState, step_path: str, load_output: OutputLoader | None
) -> tuple[StepLocation, dict[str, Any]]:
    plan = plan_for(ctx.version)
    where = locate_step(plan, step_path)
    lookup = _state_lookup(state)
    if where.parallel is None:
        steps = scope_steps_root(plan.top, "", lookup, load_output)
        return where, build_context(plan.lwir, ctx.run_input, where.step, steps)
    item = _branch_item(ctx, plan, state, where, lookup)
    steps = scope_steps_root(
        where.scope,
        where.prefix,
        lookup,
        load_output,
        allowed_top=where.parallel.needs,
        top_lookup=lookup,
    )
    return where, build_context(plan.lwir, ctx.run_input, where.step, steps, (True, item))


def expression_context(
    ctx: RunContext, state: RunState, step_path: str, *, load_output: OutputLoader | None = None
) -> dict[str, Any]:
    """The ``{{ }}`` context of the step at ``step_path``: ``input``, ``item`` (inside a
    branch), ``step``, ``workflow`` and ``steps`` (see the module docstring), ``steps`` as a
    plain ``dict`` of every completed step."""
    context = _context_at(ctx, state, step_path, load_output)[1]
    context["steps"] = dict(context["steps"])
    return context


def resolve_step_input(
    ctx: RunContext, state: RunState, step_path: str, *, load_output: OutputLoader | None = None
) -> Any:
    """Upstream's ``resolveStepInput``: ``step.input`` resolved; else ``with.args`` resolved;
    else the branch's ``item`` inside a branch, or the run input. May return ``UNDEFINED``.

    Raises :class:`~little_dist.expressions.ExpressionError` when an expression fails.
    """
    where, context = _context_at(ctx, state, step_path, load_output)
    raw = where.step.raw
    if "input" in raw:
        return resolve_value(raw["input"], context)
    config = raw.get("with")
    if isinstance(config, Mapping) and "args" in config:
        return resolve_value(config["args"], context)
    return context.get("item", ctx.run_input)


def resolve_step_config(
    ctx: RunContext, state: RunState, step_path: str, *, load_output: OutputLoader | None = None
) -> Any:
    """Upstream's ``resolveStepConfig``: the step's ``with`` block with expressions resolved
    (an ``ai.generate`` step's rendered ``prompt`` is ``result["prompt"]``)."""
    where, context = _context_at(ctx, state, step_path, load_output)
    config = where.step.raw.get("with")
    return resolve_value(config if isinstance(config, Mapping) else {}, context)
