"""A fixed ``plan=`` planned once per input, recorded in one append.

A workflow defined with ``plan=`` has one draft and no model: what its planning session
records for a fresh run depends only on the definition and the input. The first run of an
input plans it the slow way's building blocks (request, validation, compile); later runs of
the same definition and input reuse that result, so submitting the hundredth run of a
100-step workflow does not serialize, hash, validate and compile the same LWIR again.

:func:`fixed_plan_events` gives the session's events (``OrchestrationRequested``,
``PlannerStarted``, ``PlannerDraftedWorkflow``, ``WorkflowValidationSucceeded``) exactly as
:func:`~little_dist.planner.resolve_version` records them, for the caller to append in one
batch with the run's start. An invalid plan gives ``None``: the caller takes the slow path,
which records the findings and fails the run.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from little_dist import occurrences
from little_dist.canonical import canonical_json, sha256_digest
from little_dist.compiler import WorkflowVersion, compile_lwir
from little_dist.events import EventInput
from little_dist.planner.binding import draft_findings
from little_dist.planner.request import OrchestrationRequest, orchestration_request
from little_dist.planner.session import (
    draft_payload,
    requested_payload,
    started_payload,
    valid_payload,
)

if TYPE_CHECKING:
    from little_dist.authoring import WorkflowDefinition

__all__ = ["FixedPlanned", "fixed_plan_events"]

# Inputs remembered per definition (most recent first out when full).
_PER_DEFINITION: Final = 32


@dataclass(frozen=True)
class FixedPlanned:
    """A fixed plan compiled for one input: the version and the planning events."""

    version: WorkflowVersion
    events: tuple[EventInput, ...]


@dataclass(frozen=True)
class _Compiled:
    version: WorkflowVersion
    requested: dict[str, Any]
    started: dict[str, Any]
    draft_json: str  # the draft payload's JSON, parsed afresh for every run
    valid: dict[str, Any]


_memo: weakref.WeakKeyDictionary[WorkflowDefinition, OrderedDict[str, _Compiled | None]] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()


def fixed_plan_events(definition: WorkflowDefinition, run_input: Any) -> FixedPlanned | None:
    """The version and planning events of a fresh run of ``definition`` (which has a
    ``plan``) on ``run_input`` (validated); ``None`` if the plan is invalid for it."""
    assert definition.plan is not None
    key = canonical_json(run_input)
    with _lock:
        known = _memo.get(definition)
        if known is not None and key in known:
            known.move_to_end(key)
            compiled = known[key]
        else:
            compiled = _MISSING
    if compiled is _MISSING:
        compiled = _compile(definition, run_input)
        with _lock:
            known = _memo.setdefault(definition, OrderedDict())
            known[key] = compiled
            while len(known) > _PER_DEFINITION:
                known.popitem(last=False)
    if compiled is None:
        return None
    return FixedPlanned(
        compiled.version,
        (
            EventInput(
                type="OrchestrationRequested",
                occurrence_id=occurrences.planner("requested"),
                payload=dict(compiled.requested),
            ),
            EventInput(
                type="PlannerStarted",
                occurrence_id=occurrences.planner("start", 1),
                payload=dict(compiled.started),
            ),
            EventInput(
                type="PlannerDraftedWorkflow",
                occurrence_id=occurrences.planner("draft", 1),
                payload=json.loads(compiled.draft_json),
            ),
            EventInput(
                type="WorkflowValidationSucceeded",
                occurrence_id=occurrences.planner("valid"),
                payload=dict(compiled.valid),
            ),
        ),
    )


_MISSING: Any = object()


def _compile(definition: WorkflowDefinition, run_input: Any) -> _Compiled | None:
    lwir = json.loads(canonical_json(dict(definition.plan or {})))
    request: OrchestrationRequest = orchestration_request(definition, run_input)
    if draft_findings(lwir, request):
        return None
    version = compile_lwir(lwir, request=request.compile_request)
    draft = draft_payload(request, 1, lwir, valid=True)
    return _Compiled(
        version=version,
        requested=requested_payload(definition, request),
        started=started_payload(request, 1, repair=False),
        draft_json=json.dumps(draft),
        valid=valid_payload(request, 1, sha256_digest(lwir), version),
    )
