"""One planning session on one run: recorded, reused, or drafted -> validated -> repaired
-> registered, every step an event with an occurrence id (see :mod:`little_dist.planner`)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from little_dist import occurrences
from little_dist.canonical import canonical_json, sha256_digest
from little_dist.compiler import WorkflowVersion, compile_lwir
from little_dist.errors import InvalidInputError
from little_dist.events import Event, EventInput
from little_dist.harness.budget_hold import CAUSE_BUDGET_EXCEEDED, CAUSE_DAILY_BUDGET_EXCEEDED
from little_dist.harness.errors import HarnessConfigError, ModelCallError
from little_dist.harness.memo import Memo
from little_dist.harness.recorder import EventRecorder
from little_dist.harness.registry import HarnessRegistry
from little_dist.harness.types import (
    HarnessContext,
    HarnessResult,
    HarnessScope,
    PlanResult,
    PlanTask,
)
from little_dist.lwir import Finding
from little_dist.planner.binding import draft_findings
from little_dist.planner.harnesses import DefaultPlanner, FixedPlan, PlannerError
from little_dist.planner.prompts import (
    outer_loop_text,
    planning_context,
    repair_note,
    synthesize_simple_lwir,
)
from little_dist.planner.request import OrchestrationRequest, orchestration_request
from little_dist.planner.reuse_files import ReuseReader, mounted_reuse_details
from little_dist.planner.review import (
    DECISION_INSTRUCTIONS,
    DECISION_KINDS,
    DEFAULT_REUSE_STRATEGY,
    ReuseBrief,
    ReuseCandidate,
    ReuseDecisionError,
    ReuseStrategy,
    decision_payload,
    planning_snapshot,
    reuse_blocks,
    reuse_brief,
    select_reuse_candidates,
    validate_reuse_decision,
)

if TYPE_CHECKING:
    from little_dist.authoring import WorkflowDefinition
    from little_dist.harness.types import Harness
    from little_dist.runtime.capabilities import Capabilities
    from little_dist.world.base import World

__all__ = ["resolve_version"]

_UNCOMPILED: Final = "uncompiled"
#: A planner call a budget could not hold (not sent): the run fails with that cause.
_REFUSALS: Final = frozenset({CAUSE_BUDGET_EXCEEDED, CAUSE_DAILY_BUDGET_EXCEEDED})


class _Session:
    """One planning session on one run: appends its events with occurrence ids."""

    def __init__(self, world: World, run_id: str, parent: Mapping[str, Any] | None = None) -> None:
        self.world = world
        self.run_id = run_id
        self.parent = dict(parent or {})  # a sub-run's link, for the RunStarted of a failure
        self.recorded: dict[str, Event] = {
            event.occurrence_id: event
            for event in world.list_events(run_id)
            if event.occurrence_id is not None
        }

    def append(self, event_type: str, occurrence_id: str, payload: dict[str, Any]) -> Event:
        event = self.world.append(
            self.run_id, EventInput(type=event_type, occurrence_id=occurrence_id, payload=payload)
        )
        self.recorded[occurrence_id] = event
        return event


def requested_payload(
    definition: WorkflowDefinition, request: OrchestrationRequest
) -> dict[str, Any]:
    """``OrchestrationRequested``'s payload (occurrence ``planner:requested``)."""
    locks = request.body["locks"]
    return {
        "requestId": request.request_id,
        "requestHash": locks["requestHash"],
        "inputHash": locks["inputHash"],
        "workflowDefinitionHash": locks["workflowDefinitionHash"],
        "inputSchemaHash": locks["inputSchemaHash"],
        "requestedOutputHash": locks["requestedOutputHash"],
        "capabilityManifestHash": request.compile_request.capability_manifest_hash,
        "workflowId": definition.id,
        **({"description": definition.description} if definition.description else {}),
        "maxWorkflowRevisions": definition.max_revisions,
    }


def started_payload(
    request: OrchestrationRequest, revision: int, *, repair: bool
) -> dict[str, Any]:
    """``PlannerStarted``'s payload (occurrence ``planner:start:{revision}``)."""
    return {"requestId": request.request_id, "revision": revision, "repair": repair}


def draft_payload(
    request: OrchestrationRequest, revision: int, lwir: Any, *, valid: bool
) -> dict[str, Any]:
    """``PlannerDraftedWorkflow``'s payload (occurrence ``planner:draft:{revision}``)."""
    try:
        lwir_hash = sha256_digest(lwir)
    except InvalidInputError:
        lwir_hash = sha256_digest(repr(lwir))
    payload: dict[str, Any] = {
        "requestId": request.request_id,
        "revision": revision,
        "valid": valid,
        "lwirHash": lwir_hash,
    }
    if isinstance(lwir, Mapping):
        payload["lwir"] = json.loads(canonical_json(dict(lwir)))
    return payload


def valid_payload(
    request: OrchestrationRequest, revision: int, lwir_hash: str, version: WorkflowVersion
) -> dict[str, Any]:
    """``WorkflowValidationSucceeded``'s payload (occurrence ``planner:valid``)."""
    return {
        "requestId": request.request_id,
        "revision": revision,
        "lwirHash": lwir_hash,
        "workflowVersionId": version.id,
        "lwirVersionId": version.lwir_version_id,
        "validationHash": version.validation_hash,
    }


def _recorded_version_id(events: Sequence[Event]) -> str | None:
    for event in events:
        payload = event.payload
        if event.type == "PlannerReuseDecisionRecorded":
            found = payload.get("resultingWorkflowVersionId")
        elif event.type in (
            "WorkflowValidationSucceeded",
            "WorkflowVersionRegistered",
            "RunStarted",
        ):
            found = payload.get("workflowVersionId")
        else:
            continue
        if isinstance(found, str) and found != _UNCOMPILED:
            return found
    return None


def _planner_harness(
    definition: WorkflowDefinition, capabilities: Capabilities
) -> tuple[Harness, Harness]:
    """``(harness, default)`` for the plan task: a custom planner harness if configured."""
    default: Harness = (
        FixedPlan(definition.plan) if definition.plan is not None else DefaultPlanner()
    )
    custom = capabilities.harness_for("planner")
    return (custom if custom is not None and definition.plan is None else default), default


def resolve_version(
    world: World,
    run_id: str,
    definition: WorkflowDefinition,
    run_input: Any,
    *,
    capabilities: Capabilities,
    parent: Mapping[str, Any] | None = None,
    outer_loop: Mapping[str, Any] | None = None,
    prompt_note: str | None = None,
    reuse_strategy: ReuseStrategy | None = None,
) -> WorkflowVersion | None:
    """The version ``run_id`` runs: recorded, reused, or planned now (see
    :mod:`little_dist.planner`). ``reuse_strategy`` (upstream's
    ``workflowVersionReuseStrategy`` of the call) wins over the definition's.

    Returns ``None`` when planning failed; the run then has ``RunFailed`` recorded with
    causeCode ``planner_validation_exhausted``, after a ``RunStarted`` that carries
    ``parent`` (a sub-run's link to its parent, see :mod:`little_dist.subruns`).
    ``outer_loop`` / ``prompt_note``: the run is one cycle of an outer loop (see
    :func:`~little_dist.planner.request.orchestration_request`); such a cycle is always
    planned afresh (the supervisor asked for another plan) and its version is not indexed
    for reuse by other runs of the definition.
    """
    events = world.list_events(run_id)
    recorded = _recorded_version_id(events)
    if recorded is not None:
        return WorkflowVersion.from_json(world.get_version(recorded))
    request = orchestration_request(
        definition, run_input, outer_loop=outer_loop, prompt_note=prompt_note
    )
    session = _Session(world, run_id, parent)
    session.append(
        "OrchestrationRequested",
        occurrences.planner("requested"),
        requested_payload(definition, request),
    )
    strategy = reuse_strategy or definition.workflow_version_reuse_strategy
    review: _Review | None = None
    if (
        outer_loop is None
        and definition.plan is None
        and (strategy or DEFAULT_REUSE_STRATEGY) == "planner_reviewed"
    ):
        review = _review(world, definition, request)
    return _plan(world, session, definition, request, run_input, capabilities, review)


@dataclasses.dataclass(frozen=True)
class _Review:
    """The candidate the planner is shown, its brief, and what forbids reusing it as is."""

    candidates: tuple[ReuseCandidate, ...]
    brief: ReuseBrief
    blocks: tuple[str, ...]

    def note(self) -> str:
        # Upstream hands the brief to the planner as a prompt note after the planning context.
        return f"\n\n\n\n--- Prior cycle note ---\n{self.brief.text}\n{DECISION_INSTRUCTIONS}"


def _review(
    world: World, definition: WorkflowDefinition, request: OrchestrationRequest
) -> _Review | None:
    """The newest candidate of ``definition``'s workflow (upstream briefs one), or None."""
    candidates = select_reuse_candidates(world, definition.id, limit=1)
    if not candidates:
        return None
    locks = request.body["locks"]
    current = planning_snapshot(requested_payload(definition, request), locks)
    blocks = reuse_blocks(
        candidates[0],
        locks,
        tools=[item.name for item in definition.tools],
        models=list(definition.models),
    )
    return _Review(tuple(candidates), reuse_brief(candidates[0], current), tuple(blocks))


def _decision(lwir: Any) -> tuple[Any, Mapping[str, Any] | None]:
    """Upstream's ``unwrapPlannerDecision``: a reply that is a reuse decision gives its LWIR
    (none for ``reuse_unchanged``) and the decision; any other reply is the LWIR."""
    if isinstance(lwir, Mapping) and lwir.get("kind") in DECISION_KINDS:
        return lwir.get("lwir"), lwir
    return lwir, None


def _decision_findings(
    decision: Mapping[str, Any], review: _Review | None
) -> tuple[dict[str, Any] | None, list[Finding]]:
    try:
        return (
            validate_reuse_decision(
                decision,
                review.candidates if review else (),
                warnings=review.brief.warnings if review else (),
                blocks=review.blocks if review else (),
            ),
            [],
        )
    except ReuseDecisionError as error:
        return None, [Finding("error", "planner_reuse_decision_invalid", "$", str(error))]


def _plan(
    world: World,
    session: _Session,
    definition: WorkflowDefinition,
    request: OrchestrationRequest,
    run_input: Any,
    capabilities: Capabilities,
    review: _Review | None = None,
) -> WorkflowVersion | None:
    harness, default = _planner_harness(definition, capabilities)
    revisions = 1 if definition.plan is not None else definition.max_revisions
    snapshot = {
        "id": definition.id,
        "description": definition.description,
        "inputSchema": definition.input_schema,
        "outputSchema": request.requested_output_schema,
        "workflowDefinitionHash": request.body["locks"]["workflowDefinitionHash"],
    }
    context = (
        planning_context(request, definition)
        + outer_loop_text(request)
        + (review.note() if review else "")
    )
    base_ctx = HarnessContext(
        run_id=session.run_id,
        role="planner",
        model=definition.planner_model.resolved(definition.planner_slot_id),
        recorder=EventRecorder(world, session.run_id, "planner", 1),
        memo=Memo.empty(),
        scope=HarnessScope(run_id=session.run_id, role="planner"),
        system=definition.system,
        skills=definition.skills,
        budgeted=_budgeted(world, session.run_id),
        pricing_fallback=capabilities.pricing_fallback,
        quotas=capabilities.quotas,
        manifest=_session_manifest(request),
    )
    registry = HarnessRegistry(default=default, overrides={"planner": harness}, repair=False)
    with mounted_reuse_details(review.candidates if review else ()) as mount:
        reader = ReuseReader(world, session.run_id, mount)
        return _revisions(
            world,
            session,
            definition,
            request,
            run_input,
            review,
            reader,
            (registry, harness, base_ctx, snapshot, context, revisions),
        )


# Long on purpose: the planner's revision loop (draft, check, note the findings, draft again)
# and its fallback, over one harness context and the findings each round hands the next.
def _revisions(
    world: World,
    session: _Session,
    definition: WorkflowDefinition,
    request: OrchestrationRequest,
    run_input: Any,
    review: _Review | None,
    reader: ReuseReader,
    setup: tuple[HarnessRegistry, Harness, HarnessContext, dict[str, Any], str, int],
) -> WorkflowVersion | None:
    registry, harness, base_ctx, snapshot, context, revisions = setup
    note: str | None = None
    last_findings: list[Finding] = []
    for revision in range(1, revisions + 1):
        session.append(
            "PlannerStarted",
            occurrences.planner("start", revision),
            started_payload(request, revision, repair=note is not None),
        )
        drafted = session.recorded.get(occurrences.planner("draft", revision))
        if review is None and drafted is not None and "lwir" in drafted.payload:
            reply: Any = drafted.payload["lwir"]
        else:
            # (with a review, the reply may be a decision: the harness gives it again, the
            # default planner from the recorded model reply)
            task = PlanTask(
                workflow_snapshot=snapshot,
                input=run_input,
                system_message=context + (note or ""),
            )
            # One recorder per revision: its attempt number is the revision.
            recorder = EventRecorder(world, session.run_id, "planner", revision)
            ctx, bash = reader.context(dataclasses.replace(base_ctx, recorder=recorder))
            try:
                result = _run_planner(registry, harness, task, ctx)
            except ModelCallError as error:
                if error.cause_code not in _REFUSALS:
                    raise
                _fail(session, definition, revision, [], refused=error)
                return None
            finally:
                if bash is not None:
                    bash.close()
            if not isinstance(result, PlanResult):
                raise PlannerError(
                    f"planner harness returned {getattr(result, 'kind', result)!r} for a plan task"
                )
            reply = result.lwir
        lwir, raw_decision = _decision(reply)
        decision: dict[str, Any] | None = None
        findings: list[Finding] = []
        if raw_decision is not None:
            decision, findings = _decision_findings(raw_decision, review)
        if decision is not None and decision["kind"] == "reuse_unchanged" and review:
            return _reuse(session, review, decision, run_input)
        if findings:
            lwir = reply  # the refused decision is what the draft records
        else:
            findings = draft_findings(lwir, request)
        version = _record_draft(session, request, revision, lwir, findings)
        if version is not None:
            registered = _register(world, session, definition, request, revision, lwir, version)
            if decision is not None:
                session.append(
                    "PlannerReuseDecisionRecorded",
                    occurrences.planner("reuse"),
                    decision_payload(
                        decision,
                        run_input,
                        brief_hash=review.brief.brief_hash if review else None,
                        resulting_version_id=registered.id,
                    ),
                )
            return registered
        note = repair_note(reply, findings)
        last_findings = findings
    floor = None if definition.plan is not None else synthesize_simple_lwir(request)
    if floor is not None and not draft_findings(floor, request):
        revision = revisions + 1
        version = _record_draft(session, request, revision, floor, [])
        if version is not None:
            return _register(world, session, definition, request, revision, floor, version)
    _fail(session, definition, revisions, last_findings)
    return None


def _run_planner(
    registry: HarnessRegistry,
    harness: Harness,
    task: PlanTask,
    ctx: HarnessContext,
) -> HarnessResult:
    """One draft from the planner harness. A planner session goes through the registry, as
    every role's does: ``harness.session.started`` with its manifest, a custom harness's
    delegation to the default, ``harness.session.completed`` / ``.failed``. A fixed
    ``plan=`` is no session (no harness decides anything): its plan is taken as it is, and
    :mod:`little_dist.planner.fixed` records the same events in one append."""
    if isinstance(harness, FixedPlan):
        return harness.run(task, ctx)
    try:
        return registry.run(task, ctx)
    except HarnessConfigError as error:  # a misbehaving harness: it will misbehave again
        raise PlannerError(str(error)) from None


def _session_manifest(request: OrchestrationRequest) -> dict[str, Any]:
    """What the planner adds to its session manifest (the registry adds the model slot and
    digest, tools and skills digests and the harness id): the request the drafts are for."""
    locks = request.body["locks"]
    return {
        "requestId": request.request_id,
        "requestHash": locks["requestHash"],
        "workflowDefinitionHash": locks["workflowDefinitionHash"],
        "capabilityManifestHash": request.compile_request.capability_manifest_hash,
    }


def _reuse(
    session: _Session, review: _Review, decision: Mapping[str, Any], run_input: Any
) -> WorkflowVersion:
    """The planner chose ``reuse_unchanged``: the candidate runs, the decision recorded."""
    version_id = decision["workflowVersionId"]
    chosen = next(c for c in review.candidates if c.workflow_version_id == version_id)
    session.append(
        "PlannerReuseDecisionRecorded",
        occurrences.planner("reuse"),
        decision_payload(
            decision,
            run_input,
            brief_hash=review.brief.brief_hash,
            resulting_version_id=version_id,
        ),
    )
    return chosen.version


def _record_draft(
    session: _Session,
    request: OrchestrationRequest,
    revision: int,
    lwir: Any,
    findings: list[Finding],
) -> WorkflowVersion | None:
    payload = draft_payload(request, revision, lwir, valid=not findings)
    session.append("PlannerDraftedWorkflow", occurrences.planner("draft", revision), payload)
    if findings:
        session.append(
            "WorkflowValidationFailed",
            occurrences.planner("invalid", revision),
            {
                **payload,
                "findings": [
                    {"severity": f.severity, "code": f.code, "path": f.path, "message": f.message}
                    for f in findings
                ],
            },
        )
        return None
    return compile_lwir(lwir, request=request.compile_request)


def _register(
    world: World,
    session: _Session,
    definition: WorkflowDefinition,
    request: OrchestrationRequest,
    revision: int,
    lwir: Any,
    version: WorkflowVersion,
) -> WorkflowVersion:
    # Stored before the event that names it, so a reader never finds a dangling id.
    world.register_version(version.id, version.to_json())
    session.append(
        "WorkflowValidationSucceeded",
        occurrences.planner("valid"),
        valid_payload(request, revision, sha256_digest(lwir), version),
    )
    if definition.plan is None and "outerLoop" not in request.body:
        world.index_version(request.body["locks"]["workflowDefinitionHash"], version.id)
    return version


def _budgeted(world: World, run_id: str) -> bool:
    """Whether the run's log holds a budget its planner's calls spend from (in process the
    budget is recorded before planning; a fleet records it with the run's start, after)."""
    from little_dist.run_state import materialize_run_state

    return materialize_run_state(world.list_events(run_id), run_id=run_id).budget_tree


def _fail(
    session: _Session,
    definition: WorkflowDefinition,
    revisions: int,
    findings: list[Finding],
    *,
    refused: ModelCallError | None = None,
) -> None:
    """``RunFailed``: no valid LWIR (``planner_validation_exhausted``), or a planner call the
    run's budget or a daily key ceiling could not hold (``refused``: its cause)."""
    detail = "; ".join(f"{f.path}: {f.message} ({f.code})" for f in findings[:5])
    message = (
        f"Planner did not produce valid LWIR for {definition.id!r} within {revisions} "
        f"revision(s)" + (f": {detail}" if detail else ".")
    )
    cause, name = "planner_validation_exhausted", "WorkflowCompileError"
    if refused is not None:
        message = f"Planner of {definition.id!r} stopped at revision {revisions}: {refused}"
        cause, name = refused.cause_code, "ModelCallError"
    session.append(
        "RunStarted", occurrences.RUN_START, {**session.parent, "workflowVersionId": _UNCOMPILED}
    )
    session.append(
        "RunFailed",
        occurrences.RUN_END,
        {
            "workflowVersionId": _UNCOMPILED,
            "error": {
                "name": name,
                "message": message,
                "causeCode": cause,
                "retriable": False,
            },
        },
    )
