"""A fixed ``plan=`` planned for an input, recorded in one append.

A workflow defined with ``plan=`` has one draft and no model: what its planning session
records for a fresh run depends only on the definition and the input. Everything that does
not depend on the input is done once per definition (:class:`_Template`): the LWIR
validated and registered, the draft checked against the request, the request's body, the
version's lock and the shared part of the version (:mod:`little_dist.fleet.versions`) as
canonical JSON with holes where the input goes. A new input then costs its own hashes: a
batch of a thousand inputs validates and compiles the LWIR once. The ids and hashes are
those of the slow path (:func:`~little_dist.planner.request.orchestration_request`,
:func:`~little_dist.compiler.compile_lwir`), which the tests compare.

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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from little_dist import occurrences
from little_dist.canonical import CanonicalTemplate, canonical_json, sha256_hex_text
from little_dist.compiler import CompileRequest, WorkflowVersion
from little_dist.compiler.lock import (
    CANONICALIZER,
    compiler_validation_document,
    shared_part_text,
    version_identity_document,
    workflow_version_id_for_hash,
)
from little_dist.compiler.version import register_lwir
from little_dist.events import EventInput
from little_dist.ids import json_string
from little_dist.planner.binding import draft_findings
from little_dist.planner.request import (
    RequestTemplate,
    bind_compile_request,
    bind_request,
    request_template,
)
from little_dist.planner.session import (
    requested_payload,
    started_payload,
    valid_payload,
)
from little_dist.world.defaults import PreparedEvent

if TYPE_CHECKING:
    from little_dist.authoring import WorkflowDefinition

__all__ = ["FixedPlanned", "FixedStart", "fixed_plan_events", "fixed_plan_start"]


@dataclass(frozen=True)
class FixedPlanned:
    """A fixed plan compiled for one input: the version and the planning events, and the
    version's shared part (canonical JSON text, the same for every input) and its digest."""

    version: WorkflowVersion
    events: tuple[EventInput, ...]
    shared_part: tuple[str, str]


@dataclass(frozen=True)
class _Template:
    """What the fixed plan of one definition compiles to for any input, holes aside."""

    request: RequestTemplate
    lwir_json: str  # the plan as the draft records it (canonical JSON)
    lwir_digest: str  # its digest, the draft's lwirHash
    canonical: str  # the registered LWIR's canonical JSON, hash and version id
    lwir_hash: str
    lwir_version_id: str
    lwir: Mapping[str, Any]  # the registered LWIR (read-only: shared by the versions)
    seed: Mapping[str, Any]  # the lock seed, input-bound fields as holes
    identity: CanonicalTemplate  # the version identity document with the same holes
    validation: CanonicalTemplate  # the validation hash's document, the same holes
    shared_part: tuple[str, str]  # (text, digest) of the shared part of every version


_templates: weakref.WeakKeyDictionary[WorkflowDefinition, _Template | None] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()


def _template_of(definition: WorkflowDefinition) -> _Template | None:
    assert definition.plan is not None
    with _lock:
        known = definition in _templates
        template = _templates.get(definition)
    if not known:
        template = _template(definition)
        with _lock:
            _templates[definition] = template
    return template


def fixed_plan_events(definition: WorkflowDefinition, run_input: Any) -> FixedPlanned | None:
    """The version and planning events of a fresh run of ``definition`` (which has a
    ``plan``) on ``run_input`` (validated); ``None`` if the plan is invalid for it."""
    template = _template_of(definition)
    if template is None:
        return None
    request = bind_request(template.request, run_input)
    version = _version(template, request.compile_request)
    draft = {
        "requestId": request.request_id,
        "revision": 1,
        "valid": True,
        "lwirHash": template.lwir_digest,
        "lwir": json.loads(template.lwir_json),
    }
    return FixedPlanned(
        version,
        (
            EventInput(
                type="OrchestrationRequested",
                occurrence_id=occurrences.planner("requested"),
                payload=requested_payload(definition, request),
            ),
            EventInput(
                type="PlannerStarted",
                occurrence_id=occurrences.planner("start", 1),
                payload=started_payload(request, 1, repair=False),
            ),
            EventInput(
                type="PlannerDraftedWorkflow",
                occurrence_id=occurrences.planner("draft", 1),
                payload=draft,
            ),
            EventInput(
                type="WorkflowValidationSucceeded",
                occurrence_id=occurrences.planner("valid"),
                payload=valid_payload(request, 1, template.lwir_digest, version),
            ),
        ),
        template.shared_part,
    )


@dataclass(frozen=True)
class FixedStart:
    """:class:`FixedPlanned` with the planning events printed already (their canonical JSON
    filled into templates, see :func:`fixed_plan_start`), and the version's binding."""

    version: WorkflowVersion
    events: tuple[PreparedEvent, ...]
    shared_part: tuple[str, str]


#: The payload fields of the planning events that vary with the input (the rest is the
#: definition's, printed once per definition).
_VARYING: Final = {
    "OrchestrationRequested": ("requestId", "requestHash", "inputHash"),
    "PlannerStarted": ("requestId",),
    "PlannerDraftedWorkflow": ("requestId",),
    "WorkflowValidationSucceeded": ("requestId", "workflowVersionId", "validationHash"),
}
_texts: weakref.WeakKeyDictionary[WorkflowDefinition, tuple[CanonicalTemplate, ...]] = (
    weakref.WeakKeyDictionary()
)


def fixed_plan_start(definition: WorkflowDefinition, run_input: Any) -> FixedStart | None:
    """:func:`fixed_plan_events`, each event's payload printed by filling the per-input
    fields into its canonical JSON, which is printed once per definition: the same bytes
    (the tests compare them) for a fraction of the cost of a batch of submissions."""
    template = _template_of(definition)
    if template is None:
        return None
    request = bind_compile_request(template.request, run_input)
    version = _version(template, request)
    with _lock:
        texts = _texts.get(definition)
    slow = None
    if texts is None:
        slow = fixed_plan_events(definition, run_input)
        assert slow is not None
        # (the order _EVENTS names, which the texts are filled in)
        assert [(e.type, e.occurrence_id) for e in slow.events] == list(_EVENTS)
        hole = CanonicalTemplate.hole
        texts = tuple(
            CanonicalTemplate(
                {**event.payload, **{name: hole(name) for name in _VARYING[event.type]}}
            )
            for event in slow.events
        )
        with _lock:
            _texts[definition] = texts
    filled = {
        "requestId": json_string(request.request_id),
        "requestHash": json_string(request.request_hash),
        "inputHash": json_string(request.input_hash),
        "workflowVersionId": json_string(version.id),
        "validationHash": json_string(version.validation_hash),
    }
    return FixedStart(
        version,
        tuple(
            PreparedEvent(kind, occurrence, text.text(filled))
            for (kind, occurrence), text in zip(_EVENTS, texts, strict=True)
        ),
        template.shared_part,
    )


#: The planning events' types and occurrence ids, in the order they are recorded.
_EVENTS: Final = (
    ("OrchestrationRequested", occurrences.planner("requested")),
    ("PlannerStarted", occurrences.planner("start", 1)),
    ("PlannerDraftedWorkflow", occurrences.planner("draft", 1)),
    ("WorkflowValidationSucceeded", occurrences.planner("valid")),
)


def _template(definition: WorkflowDefinition) -> _Template | None:
    """The definition's :class:`_Template`; ``None`` when its plan is invalid (for any
    input: the checks read the definition, never the input)."""
    lwir_json = canonical_json(dict(definition.plan or {}))
    lwir = json.loads(lwir_json)
    request = request_template(definition)
    # Any input binds the same checks; the template's holes stand in for it.
    if draft_findings(lwir, bind_request(request, None)):
        return None
    canonical, lwir_hash, lwir_version_id, registered = register_lwir(lwir)
    hole = CanonicalTemplate.hole
    holes = CompileRequest(
        request_id=hole("requestId"),
        request_hash=hole("requestHash"),
        input_hash=hole("inputHash"),
        planned_input_structure=hole("structure"),  # type: ignore[arg-type]  # (a hole)
        planned_input_structure_hash=hole("structureHash"),
        **request.compile_fields,
    )
    seed = holes.lock_seed(
        lwir_version_id=lwir_version_id,
        lwir_hash=lwir_hash,
        validation_hash=hole("validationHash"),
    )
    shared = shared_part_text(
        canonical=canonical,
        lwir_hash=lwir_hash,
        lwir_version_id=lwir_version_id,
        canonicalizer=CANONICALIZER,
        lock=seed,
    )
    return _Template(
        request=request,
        lwir_json=lwir_json,
        lwir_digest="sha256:" + sha256_hex_text(lwir_json),
        canonical=canonical,
        lwir_hash=lwir_hash,
        lwir_version_id=lwir_version_id,
        lwir=registered,
        seed=seed,
        identity=CanonicalTemplate(
            version_identity_document(seed, lwir_version_id=lwir_version_id, lwir_hash=lwir_hash)
        ),
        validation=CanonicalTemplate(
            compiler_validation_document(
                lwir_version_id=lwir_version_id,
                lwir_hash=lwir_hash,
                request_id=hole("requestId"),
                request_hash=hole("requestHash"),
                input_hash=hole("inputHash"),
                planned_input_structure_hash=hole("structureHash"),
                workflow_definition_hash=holes.workflow_definition_hash,
                input_schema_hash=holes.input_schema_hash,
                requested_output_hash=holes.requested_output_hash,
                capability_manifest_hash=holes.capability_manifest_hash,
            )
        ),
        shared_part=(shared, "sha256:" + sha256_hex_text(shared)),
    )


def _version(template: _Template, request: CompileRequest) -> WorkflowVersion:
    """:func:`~little_dist.compiler.compile_lwir` of the template's LWIR for ``request``,
    the lock's hash filled into the template instead of walked."""
    # The request's own fields are ASCII ids and digests (their JSON is quick to print).
    filled = {
        "requestId": json_string(request.request_id),
        "requestHash": json_string(request.request_hash),
        "inputHash": json_string(request.input_hash),
        "structure": canonical_json(request.planned_input_structure),
        "structureHash": json_string(request.planned_input_structure_hash),
    }
    validation_hash = template.validation.digest(filled)
    filled["validationHash"] = json_string(validation_hash)
    bound: dict[str, Any] = {
        "requestId": request.request_id,
        "requestHash": request.request_hash,
        "inputHash": request.input_hash,
        "plannedInputStructure": request.planned_input_structure,
        "plannedInputStructureHash": request.planned_input_structure_hash,
        "validationHash": validation_hash,
    }
    version_hash = template.identity.digest(filled)
    version_id = workflow_version_id_for_hash(version_hash)
    lock = {
        "workflowVersionId": version_id,
        "workflowVersionHash": version_hash,
        **{key: bound.get(key, value) for key, value in template.seed.items()},
    }
    return WorkflowVersion(
        id=version_id,
        hash=version_hash,
        lwir_version_id=template.lwir_version_id,
        lwir_hash=template.lwir_hash,
        canonical_json=template.canonical,
        lwir=template.lwir,
        lock=lock,
    )
