"""A submission, checked (:class:`SubmitRequest`): what :mod:`~little_dist.fleet.submission`
records. Which run, which input (JSON, within the limits), and where its version comes from:
compiled here (an LWIR document or a compiled version), a definition's fixed ``plan=`` (its
grants checked against the capabilities the workers run it with), or the planner's. Nothing
here reads or writes a world."""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from little_dist.canonical import (
    NonHashableValueError,
    canonical_json,
    sha256_hex_text,
)
from little_dist.compiler import WorkflowVersion, compile_lwir
from little_dist.errors import InvalidInputError
from little_dist.fleet.callback_urls import check_callback_url
from little_dist.ids import validate_run_id
from little_dist.lazy import cached
from little_dist.limits import InputLimits
from little_dist.local_runner import check_run_input, new_run_id
from little_dist.run_limits import RunLimits, run_limits
from little_dist.runtime import check_grants
from little_dist.world.defaults import PreparedEvent

if TYPE_CHECKING:
    from little_dist.authoring import WorkflowDefinition
    from little_dist.fleet.app_registry import AppRegistry
    from little_dist.runtime import Capabilities

__all__ = ["Planned", "SubmitRequest", "checked_request", "json_value", "planned_version"]


def json_value(value: Any, limits: InputLimits, what: str = "the run input") -> Any:
    import json

    try:
        return json.loads(limits.check_input(value, what))
    except NonHashableValueError as error:
        raise InvalidInputError(f"{what} is not JSON: {error}") from error


@dataclass
class SubmitRequest:
    """A submission, checked: its run, its input and where its version comes from (one
    of ``version``, ``definition``, ``planner_path``)."""

    run_id: str
    run_input: Any
    #: Compiled here (an LWIR document or a compiled version was submitted).
    version: WorkflowVersion | None = None
    #: A definition with a fixed ``plan=``, resolved here.
    definition: WorkflowDefinition | None = None
    #: A workflow the planner plans (a definition without a plan, or a registered id).
    planner_path: str | None = None
    #: The run id was made up here: no archive can hold it (a given one costs a look at S3
    #: before its log starts, so an archived run is never started again).
    fresh: bool = False
    #: A sub-run's link to its parent run, recorded in its ``RunStarted``.
    parent: Mapping[str, Any] | None = None
    #: The run's dollar ceiling (the submission's, else the definition's), recorded as
    #: ``little.run.budget`` before its start (see :mod:`little_dist.budgets`).
    budget_usd: float | None = None
    #: The run's limits (a deadline, upstream's run-level timeout and maxAttempts: the
    #: submission's, else the definition's), recorded as ``little.run.limits`` before its
    #: start (see :mod:`little_dist.run_limits`); empty: none.
    limits: RunLimits = field(default_factory=RunLimits)
    #: Where the scheduler POSTs the run's end (checked), recorded as
    #: ``little.run.callback`` with its start (see :mod:`little_dist.fleet.callbacks`).
    callback_url: str | None = None

    @cached
    def input_text(self) -> str:
        """The input's canonical JSON, printed once."""
        return canonical_json(self.run_input)

    @cached
    def input_hash(self) -> str:
        return "sha256:" + sha256_hex_text(self.input_text)


def checked_request(
    workflow: WorkflowDefinition | WorkflowVersion | Mapping[str, Any] | str,
    run_input: Any,
    run_id: str | None,
    registry: AppRegistry | None,
    limits: InputLimits,
    *,
    grants: bool = True,
    budget_usd: float | None = None,
    timeout: Any = None,
    deadline: Any = None,
    max_attempts: int | None = None,
    callback_url: str | None = None,
) -> SubmitRequest:
    """What is submitted, checked against the limits and the registry's capabilities
    before anything is read or written (``grants=False``: a fixed plan's grants were
    checked for an earlier input of the batch; they do not depend on the input).
    ``budget_usd``: the run's dollar ceiling (checked; default: the definition's)."""
    from little_dist.authoring import WorkflowDefinition
    from little_dist.budgets import budget_usd as checked_budget

    budget = checked_budget(budget_usd, "submit")
    callback = None if callback_url is None else check_callback_url(callback_url)
    fresh = run_id is None
    run_id = new_run_id() if run_id is None else validate_run_id(run_id)
    request = _request(workflow, run_input, run_id, registry, limits, grants=grants)
    request.fresh = fresh
    request.callback_url = callback
    if budget is None:
        named = registry.get(workflow) if isinstance(workflow, str) and registry else workflow
        if isinstance(named, WorkflowDefinition):
            budget = named.budget_usd
    request.budget_usd = budget
    named = registry.get(workflow) if isinstance(workflow, str) and registry else workflow
    own = named if isinstance(named, WorkflowDefinition) else None
    request.limits = run_limits(
        "submit",
        now=time.time(),
        timeout=timeout if timeout is not None or own is None else own.timeout_ms,
        deadline=deadline,
        attempts=max_attempts if max_attempts is not None or own is None else own.max_attempts,
    )
    return request


def _request(
    workflow: WorkflowDefinition | WorkflowVersion | Mapping[str, Any] | str,
    run_input: Any,
    run_id: str,
    registry: AppRegistry | None,
    limits: InputLimits,
    *,
    grants: bool,
) -> SubmitRequest:
    from little_dist.authoring import WorkflowDefinition

    if isinstance(workflow, str) and registry is not None:
        workflow = registry.get(workflow) or workflow
    if isinstance(workflow, WorkflowDefinition):
        run_input = workflow.validate_input(run_input, limits=limits)
        if workflow.plan is None:
            return SubmitRequest(run_id, run_input, planner_path=workflow.id)
        if grants:
            _check_plan_grants(workflow, registry)
        return SubmitRequest(run_id, run_input, definition=workflow)
    if isinstance(workflow, str):
        return SubmitRequest(run_id, json_value(run_input, limits), planner_path=workflow)
    if isinstance(workflow, WorkflowVersion):
        limits.check_lwir(workflow.lwir)
        run_input = json_value(run_input, limits)
        version = workflow
    elif isinstance(workflow, Mapping):
        limits.check_lwir(workflow)
        run_input = json_value(run_input, limits)
        version = compile_lwir(dict(workflow), input=run_input)
    else:
        raise InvalidInputError(
            "submit takes an LWIR document, a WorkflowVersion, a workflow made with "
            f"define_workflow() or a registered workflow id, got {type(workflow).__name__}"
        )
    check_run_input(version, run_input)
    if registry is not None:
        registry.check_version(version)
    return SubmitRequest(run_id, run_input, version=version)


def _check_plan_grants(definition: WorkflowDefinition, registry: AppRegistry | None) -> None:
    """The plan is the author's, but the workers run it with the registered workflow's
    capabilities: it may not name more than those. A definition's plan found within the
    capabilities it is checked against (the registry keeps one per workflow) is not checked
    again: both are fixed once made (the walk costs a submission of a 100-step plan 0.6 ms).
    """
    assert definition.plan is not None
    registered = registry is not None and registry.get(definition.id) is not None
    capabilities = (
        registry.capabilities_for_workflow(definition.id)
        if registry is not None and registered
        else definition.capabilities()
    )
    with _granted_lock:
        granted = _granted.get(definition, ())
        if any(ref() is capabilities for ref in granted):
            return
    check_grants(definition.plan, capabilities, f"workflow {definition.id!r}")
    with _granted_lock:
        kept = [ref for ref in _granted.get(definition, ()) if ref() is not None]
        _granted[definition] = [*kept[-(_GRANTED_PER_DEFINITION - 1) :], weakref.ref(capabilities)]


# Per definition, the capabilities its plan was found within (weakly: a definition's
# capabilities made anew each time, without a registry, are not kept alive by this).
_granted: weakref.WeakKeyDictionary[WorkflowDefinition, list[weakref.ref[Capabilities]]] = (
    weakref.WeakKeyDictionary()
)
_granted_lock = threading.Lock()
_GRANTED_PER_DEFINITION = 4


@dataclass(frozen=True)
class Planned:
    version: WorkflowVersion
    # The events the start records first, printed already (see fixed_plan_start).
    planning: Sequence[PreparedEvent] = ()
    shared_part: tuple[str, str] | None = None  # its text and digest, when known


def planned_version(request: SubmitRequest) -> Planned | None:
    """The version a request runs and the planning events its start records first;
    ``None`` for a fixed plan that is invalid for the input."""
    if request.version is not None:
        return Planned(request.version)
    from little_dist.planner.fixed import fixed_plan_start

    assert request.definition is not None
    planned = fixed_plan_start(request.definition, request.run_input)
    if planned is None:
        return None
    return Planned(planned.version, planned.events, planned.shared_part)
