"""A workflow version's LWIR, planned once for scheduling: steps with their edges precomputed.

:func:`plan_for` turns ``version.lwir`` into a :class:`WorkflowPlan` (a tree of
:class:`ScopePlan` — the top level and each parallel step's branch steps — of
:class:`StepPlan`), caching the result by version id in a small LRU, so ``decide`` never
re-reads the LWIR per call. Also here: the path helpers that name branches and visits
(upstream's ``stepPathFor``, ``parallelAttemptPath``, ``encodeBranchPathKey``) and output
contract checks (upstream's ``validateStepOutput`` / ``stepOutputSchemaHash``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote

from jsonschema.exceptions import best_match

from little_dist.canonical import sha256_digest
from little_dist.compiler import WorkflowVersion
from little_dist.scheduling.schema_checks import compiled_schema

__all__ = [
    "ALPHA_MAX_BRANCHES",
    "END",
    "ParallelPlan",
    "ScopePlan",
    "StepPlan",
    "WorkflowPlan",
    "branch_path_for",
    "encode_branch_key",
    "next_in_chain",
    "parallel_attempt_path",
    "plan_for",
    "schema_error",
    "visit_path",
]

#: The most branches a valid LWIR may declare (upstream's ``ALPHA_MAX_BRANCHES``).
ALPHA_MAX_BRANCHES: Final = 100
#: The decision target that ends the current scope.
END: Final = "end"
_CACHE_SIZE: Final = 64
_CACHE_LWIR_CHARS: Final = 32 * 1024 * 1024


@dataclass(frozen=True, eq=False)
class ParallelPlan:
    """A parallel step's ``with`` block, read once."""

    items: str
    item_key: str
    max_branches: int
    max_concurrency: int
    failure_mode: str
    fan_in_order: str
    output_step: str | None
    children: ScopePlan


@dataclass(eq=False)
class StepPlan:
    """One LWIR step with what the scheduler asks of it precomputed.

    ``raw`` is the step object itself (read-only). ``dependents`` are the steps of the same
    scope that need this one; ``targets`` a decision's routing targets other than ``end``;
    ``controllers`` the decisions that route to this step; ``downstream`` the steps
    transitively needing it (upstream's ``transitiveDownstreamOf``).
    """

    id: str
    index: int
    raw: Mapping[str, Any]
    uses: str
    needs: tuple[str, ...]
    max_visits: int
    max_attempts: int | None
    fixer_max_attempts: int
    output: Mapping[str, Any] | None
    parallel: ParallelPlan | None = None
    dependents: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    controllers: tuple[str, ...] = ()
    cases: tuple[tuple[str, str], ...] = ()
    default: str | None = None
    awaits_routing: bool = False
    #: The scope's dependents by step id (shared by its steps), for :attr:`downstream`.
    scope_dependents: Mapping[str, Sequence[str]] = field(default_factory=dict, repr=False)
    _downstream: frozenset[str] | None = field(default=None, repr=False)

    @property
    def downstream(self) -> frozenset[str]:
        """The steps transitively needing this one, found on first use: only a decision's
        target is ever asked, and building every step's set up front cost O(N^2) time and
        memory for a chain of N steps (a 600-step chain's plan took a fifth of its run)."""
        found = self._downstream
        if found is None:
            seen: set[str] = set()
            frontier = [self.id]
            while frontier:
                for dependent in self.scope_dependents.get(frontier.pop(), ()):
                    if dependent not in seen and dependent != self.id:
                        seen.add(dependent)
                        frontier.append(dependent)
            found = self._downstream = frozenset(seen)
        return found

    @property
    def multi_visit(self) -> bool:
        return self.max_visits > 1

    def path(self, prefix: str, visit: int) -> str:
        """The step path of one visit under ``prefix`` (``""`` or ``"<branchPath>."``)."""
        return visit_path(prefix + self.id, self.max_visits, visit)


@dataclass(eq=False)
class ScopePlan:
    """The steps of one scope (top level or a parallel step's branch) in LWIR order."""

    steps: tuple[StepPlan, ...]
    by_id: dict[str, StepPlan]
    has_decisions: bool
    final_step: StepPlan | None
    final_error: str | None


@dataclass(eq=False)
class WorkflowPlan:
    """A version's LWIR ready for ``decide``: the top scope and the workflow output contract."""

    version_id: str
    lwir: Mapping[str, Any]
    top: ScopePlan
    output_schema: Any
    contract_error: str | None


def visit_path(base: str, max_visits: int, visit: int) -> str:
    """``base`` plus ``.visit[n]`` when the step may be visited more than once."""
    return f"{base}.visit[{visit}]" if max_visits > 1 else base


def encode_branch_key(item_key: str) -> str:
    """JavaScript's ``encodeURIComponent(itemKey)`` with ``.`` as ``%2E`` (upstream's rule)."""
    return quote(item_key, safe="-_.!~*'()").replace(".", "%2E")


def parallel_attempt_path(step_path: str, attempt: int) -> str:
    """Attempt 1 branches live under the step path; attempt n under ``path@attempt_n``."""
    return step_path if attempt == 1 else f"{step_path}@attempt_{attempt}"


def branch_path_for(step_path: str, attempt: int, item_key: str) -> str:
    """``review[cand_1]`` for attempt 1, ``review@attempt_2[cand_1]`` for a retry."""
    return f"{parallel_attempt_path(step_path, attempt)}[{encode_branch_key(item_key)}]"


def schema_error(plan: WorkflowPlan, schema: Any, value: Any) -> str | None:
    """Why ``value`` does not match ``schema`` (``None`` when it does), like Ajv's text."""
    if schema is True or schema is None:
        return None
    if schema is False:
        return "schema rejects all values"
    if not isinstance(schema, Mapping):
        return None
    compiled = compiled_schema(schema)
    if compiled.accepts_quickly(value):
        return None  # (a quick "valid" is draft-07's; a "no" gets jsonschema's message)
    error = best_match(compiled.validator.iter_errors(value))
    if error is None:
        return None
    location = "".join(f"/{part}" for part in error.absolute_path)
    return f"{location} {error.message}" if location else error.message


def _int_or_none(value: Any) -> int | None:
    return value if type(value) is int and value > 0 else None


def _step_plan(raw: Mapping[str, Any], index: int) -> StepPlan:
    uses = raw.get("uses")
    needs_value = raw.get("needs")
    needs = tuple(n for n in needs_value if type(n) is str) if type(needs_value) is list else ()
    max_visits = raw.get("maxVisits")
    retry = raw.get("retry")
    on_failure = raw.get("onFailure")
    fixer = on_failure.get("fixer") if isinstance(on_failure, Mapping) else None
    output = raw.get("output")
    plan = StepPlan(
        id=str(raw.get("id")),
        index=index,
        raw=raw,
        uses=str(uses),
        needs=needs,
        max_visits=max_visits if type(max_visits) is int and max_visits > 1 else 1,
        max_attempts=_int_or_none(retry.get("maxAttempts")) if isinstance(retry, Mapping) else None,
        # Upstream runs the fixer for code.run steps only.
        fixer_max_attempts=(_int_or_none(fixer.get("maxAttempts")) or 0)
        if uses == "code.run" and isinstance(fixer, Mapping)
        else 0,
        output=output if isinstance(output, Mapping) else None,
    )
    config = raw.get("with")
    if uses == "decision" and isinstance(config, Mapping):
        cases = config.get("cases")
        plan.cases = tuple(
            (case["when"], case["to"])
            for case in (cases if type(cases) is list else [])
            if isinstance(case, Mapping)
            and type(case.get("when")) is str
            and type(case.get("to")) is str
        )
        default = config.get("default")
        plan.default = default if type(default) is str else None
        targets = [to for _, to in plan.cases] + ([plan.default] if plan.default else [])
        plan.targets = tuple(dict.fromkeys(t for t in targets if t != END))
    if uses == "parallel" and isinstance(config, Mapping):
        fan_in = config.get("fanIn")
        fan_in = fan_in if isinstance(fan_in, Mapping) else {}
        children = raw.get("steps")
        output_step = fan_in.get("outputStep")
        plan.parallel = ParallelPlan(
            items=str(config.get("items")),
            item_key=str(config.get("itemKey")),
            max_branches=int(config.get("maxBranches") or 1),
            max_concurrency=int(config.get("maxConcurrency") or 1),
            failure_mode=str(config.get("failureMode")),
            fan_in_order=str(fan_in.get("order", "input")),
            output_step=output_step if type(output_step) is str else None,
            children=_scope_plan(children if type(children) is list else []),
        )
    return plan


def _final_step(steps: Sequence[StepPlan]) -> tuple[StepPlan | None, str | None]:
    """Upstream's ``finalOutputStep``: the one non-decision step nothing needs or routes to."""
    needed = {need for step in steps for need in step.needs}
    targets = {target for step in steps for target in step.targets}
    terminals = [
        step
        for step in steps
        if step.id not in needed and step.uses != "decision" and step.id not in targets
    ]
    if len(terminals) > 1:
        return None, f"Ambiguous terminal steps: {', '.join(s.id for s in terminals)}."
    return (terminals[0] if terminals else None), None


def _ancestors(by_id: Mapping[str, StepPlan], step: StepPlan) -> set[str]:
    seen: set[str] = set()
    frontier = list(step.needs)
    while frontier:
        need = frontier.pop()
        if need in seen or need not in by_id:
            continue
        seen.add(need)
        frontier.extend(by_id[need].needs)
    return seen


def _scope_plan(raw_steps: Sequence[Any]) -> ScopePlan:
    steps = tuple(
        _step_plan(raw, index) for index, raw in enumerate(raw_steps) if isinstance(raw, Mapping)
    )
    by_id = {step.id: step for step in steps}
    dependents: dict[str, list[str]] = {step.id: [] for step in steps}
    controllers: dict[str, list[str]] = {step.id: [] for step in steps}
    for step in steps:
        for need in step.needs:
            if need in dependents:
                dependents[need].append(step.id)
        for target in step.targets:
            if target in controllers:
                controllers[target].append(step.id)
    for step in steps:
        step.dependents = tuple(dependents[step.id])
        step.controllers = tuple(controllers[step.id])
        step.scope_dependents = dependents
    # A decision target that its decision does not (transitively) need is a branch of the
    # route, not a loop entry: it runs only when routed to. (Upstream gets this from running
    # steps one at a time in LWIR order; run concurrently, it has to be said.)
    for step in steps:
        step.awaits_routing = any(
            step.id not in _ancestors(by_id, by_id[controller]) for controller in step.controllers
        )
    final, final_error = _final_step(steps)
    return ScopePlan(
        steps=steps,
        by_id=by_id,
        has_decisions=any(step.uses == "decision" for step in steps),
        final_step=final,
        final_error=final_error,
    )


def _schema_type(schema: Any) -> str | None:
    if not isinstance(schema, Mapping):
        return None
    kind = schema.get("type")
    if type(kind) is str:
        return kind
    if type(kind) is list and len(kind) == 1 and type(kind[0]) is str:
        return str(kind[0])
    return None


def _output_type(output: Mapping[str, Any]) -> str | None:
    mode = output.get("mode")
    if mode in ("text", "choice"):
        return "string"
    if mode in ("object", "array"):
        return str(mode)
    if mode == "json":
        return _schema_type(output.get("schema"))
    return None


def _contract_error(top: ScopePlan, output_schema: Any) -> str | None:
    """Upstream's ``assertTerminalOutputContractCompatible`` as a message, or ``None``."""
    final = top.final_step
    if final is None or final.output is None:
        return None
    workflow_type = _schema_type(output_schema)
    step_type = _output_type(final.output)
    if workflow_type is None or step_type is None or workflow_type == step_type:
        return None
    return (
        f"Terminal step '{final.id}' output mode '{final.output.get('mode')}' is incompatible "
        f"with workflow output schema type '{workflow_type}'."
    )


def _build(version: WorkflowVersion) -> WorkflowPlan:
    lwir = version.lwir
    steps = lwir.get("steps")
    top = _scope_plan(steps if isinstance(steps, list) else [])
    output = lwir.get("output")
    output_schema = output.get("schema", True) if isinstance(output, Mapping) else True
    return WorkflowPlan(
        version_id=version.id,
        lwir=lwir,
        top=top,
        output_schema=output_schema,
        contract_error=_contract_error(top, output_schema),
    )


# Plans by version, with the length of the version's canonical LWIR (what a plan holds grows
# with it): bounded by count and by that length (a few large versions cannot take it all).
# (An OrderedDict kept by hand, not little_dist.lru: plan_for is called several times per
# step, and a hit must cost what a dict lookup does.)
_plans: OrderedDict[tuple[str, str], tuple[WorkflowPlan, int]] = OrderedDict()
_plans_chars = 0
_plans_lock = threading.Lock()


def next_in_chain(plan: WorkflowPlan, step_path: str) -> str | None:
    """The path of the one top-level step that needs exactly ``step_path`` (a top-level step
    visited once) and that a worker runs (``tool.call``, ``ai.generate``), with no decision
    routing to it; ``None`` if there is not exactly one. A hint for who runs what next, not
    a scheduling decision: ``decide`` still says whether it is ready."""
    step = plan.top.by_id.get(step_path)
    if step is None or step.multi_visit:
        return None
    found = [
        plan.top.by_id[name]
        for name in step.dependents
        if name in plan.top.by_id
        and plan.top.by_id[name].needs == (step_path,)
        and not plan.top.by_id[name].multi_visit
        and not plan.top.by_id[name].controllers
        and plan.top.by_id[name].uses in ("tool.call", "ai.generate")
    ]
    return found[0].id if len(found) == 1 else None


def plan_for(version: WorkflowVersion) -> WorkflowPlan:
    """The plan of ``version``, built on first use and kept in a small LRU by version id."""
    key = (version.id, version.lwir_hash)
    with _plans_lock:
        found = _plans.get(key)
        if found is not None:
            _plans.move_to_end(key)
            return found[0]
    built = _build(version)
    size = len(version.canonical_json)
    global _plans_chars
    with _plans_lock:
        old = _plans.pop(key, None)
        _plans[key] = (built, size)
        _plans_chars += size - (old[1] if old is not None else 0)
        while len(_plans) > 1 and (len(_plans) > _CACHE_SIZE or _plans_chars > _CACHE_LWIR_CHARS):
            _, (_, dropped) = _plans.popitem(last=False)
            _plans_chars -= dropped
    return built


def output_schema_hash(output: Mapping[str, Any] | None) -> str | None:
    """Upstream's ``stepOutputSchemaHash`` for a step's output contract."""
    if output is None:
        return None
    mode = output.get("mode")
    if mode == "text":
        return sha256_digest({"type": "string"})
    if mode == "choice":
        values = output.get("values")
        return sha256_digest({"type": "string", "enum": list(values) if values else []})
    schema = output.get("schema")
    return None if schema is None else sha256_digest(schema)


def step_output_error(plan: WorkflowPlan, step: StepPlan, value: Any) -> str | None:
    """Upstream's ``validateStepOutput`` message for ``value``, or ``None`` when it passes."""
    output = step.output
    if output is None:
        return None
    label = f"Step '{step.id}' output"
    mode = output.get("mode")
    if mode == "text":
        return None if type(value) is str else f"{label} does not match text output mode."
    if mode == "choice":
        values = output.get("values") or []
        ok = type(value) is str and value in values
        return None if ok else f"{label} does not match choice output mode."
    if mode == "object" and not isinstance(value, Mapping):
        return f"{label} does not match object output mode."
    if mode == "array" and not isinstance(value, list):
        return f"{label} does not match array output mode."
    problem = schema_error(plan, output.get("schema"), value)
    return None if problem is None else f"{label} does not match schema: {problem}"


__all__ += ["output_schema_hash", "step_output_error"]
