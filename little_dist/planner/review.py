"""Planner-reviewed reuse (upstream's ``planner-reuse.ts``): the candidate a planner is shown,
the brief it reads, and the check of the decision it replies with.

A run of a workflow whose reuse strategy is ``planner_reviewed`` (the default; the other is
``always_fresh``, upstream's ``WorkflowVersionReuseStrategy``) looks for the newest completed
run of the same workflow id (:func:`select_reuse_candidates`: ``OrchestrationRequested`` of
that id first, ``RunCompleted`` last, a readable version with a runtime lock). The planner
is shown its brief (:func:`reuse_brief`: upstream's text, Mermaid step graph, mounted detail
paths and warnings, hashed) and replies either with an LWIR (an ordinary draft) or with a
decision:

* ``{"kind": "reuse_unchanged", "workflowVersionId", "rationale", "acknowledgedWarnings"?}``
  — run the candidate as it is: allowed when no *block* holds (the requested output
  contract, or a tool or model it uses, changed) and every *warning* is acknowledged;
* ``{"kind": "adapt", "baseWorkflowVersionId", "rationale", "lwir"}`` — a new LWIR based on
  the candidate;
* ``{"kind": "draft_fresh", "rationale", "lwir"}`` — a new LWIR from scratch.

:func:`validate_reuse_decision` checks one with upstream's rules and messages; the planner
session (:mod:`little_dist.planner.session`) records what was decided as
``PlannerReuseDecisionRecorded`` (:func:`decision_payload`, upstream's payload).

Candidate selection reads two events of every run of the world (one round trip each on
Redis): cheap beside a planner call, but it grows with the number of runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

# The strategies are the authoring layer's (a definition and a run choose one); named here
# too, where the planner reads them.
from little_dist.authoring.options import (
    DEFAULT_REUSE_STRATEGY,
    REUSE_STRATEGIES,
    ReuseStrategy,
    reuse_strategy,
)
from little_dist.canonical import sha256_digest
from little_dist.compiler import WorkflowVersion
from little_dist.compiler.lock import concrete_input_structure
from little_dist.errors import InvalidInputError, LittleError
from little_dist.event_types.engine import SUBMITTED_EVENT_TYPE
from little_dist.lwir import validate_lwir

if TYPE_CHECKING:
    from little_dist.world.base import World

__all__ = [
    "DEFAULT_REUSE_STRATEGY",
    "REUSE_STRATEGIES",
    "ReuseBrief",
    "ReuseCandidate",
    "ReuseDecisionError",
    "ReuseStrategy",
    "decision_payload",
    "reuse_blocks",
    "reuse_brief",
    "reuse_strategy",
    "select_reuse_candidates",
    "validate_reuse_decision",
]

#: Where upstream mounts the candidate's details for the planner (named in the brief).
MOUNTED_ROOT: Final = "/planner/reuse"
DECISION_KINDS: Final = ("reuse_unchanged", "adapt", "draft_fresh")
#: Events read after a fleet run's submission to find its ``OrchestrationRequested`` (the
#: next one, unless failed plans were noted first).
_PLANNING_PEEK: Final = 8


class ReuseDecisionError(InvalidInputError):
    """A planner reuse decision that upstream's rules refuse (malformed, a missing candidate,
    a blocked or unacknowledged ``reuse_unchanged``, an invalid LWIR)."""


@dataclass(frozen=True)
class ReuseCandidate:
    """A version a completed run of the workflow ran (upstream's ``PlannerReuseCandidate``)."""

    workflow_version_id: str
    run_id: str
    workflow_id: str
    completed_at: str
    version: WorkflowVersion
    requested: Mapping[str, Any]  # the candidate run's OrchestrationRequested payload
    prior_output: Any = None


def select_reuse_candidates(
    world: World, workflow_id: str, *, limit: int | None = None
) -> list[ReuseCandidate]:
    """Completed runs of ``workflow_id``, newest first, one per version (upstream's
    ``selectPlannerReuseCandidates``). A run planned on the fleet opens its log with its
    submission (``little.run.submitted``) before its ``OrchestrationRequested``: read
    after it, for the completed runs of the workflow only."""
    found: list[ReuseCandidate] = []
    for run_id in world.list_run_ids():
        ends = world.first_and_last_events(run_id)
        if ends is None:
            continue
        first, last = ends
        if first.payload.get("workflowId") != workflow_id:
            continue
        version_id = last.payload.get("workflowVersionId")
        if last.type != "RunCompleted" or not isinstance(version_id, str):
            continue
        if first.type == SUBMITTED_EVENT_TYPE:
            after = world.list_events(run_id, after=first.sequence, limit=_PLANNING_PEEK)
            first = next((e for e in after if e.type == "OrchestrationRequested"), first)
        if first.type != "OrchestrationRequested":
            continue
        try:
            version = WorkflowVersion.from_json(world.get_version(version_id))
        except LittleError:
            continue  # missing, unreadable or altered: never offered
        if not _runtime_lock(version):
            continue
        found.append(
            ReuseCandidate(
                workflow_version_id=version_id,
                run_id=run_id,
                workflow_id=workflow_id,
                completed_at=last.recorded_at,
                version=version,
                requested=dict(first.payload),
                prior_output=last.payload.get("output"),
            )
        )
    found.sort(key=lambda item: (item.completed_at, item.run_id), reverse=True)
    newest: dict[str, ReuseCandidate] = {}
    for item in found:
        newest.setdefault(item.workflow_version_id, item)
    selected = list(newest.values())
    return selected if limit is None else selected[: max(0, limit)]


_LOCK_HASHES: Final = (
    "workflowVersionHash",
    "lwirHash",
    "requestHash",
    "inputHash",
    "plannedInputStructureHash",
    "workflowDefinitionHash",
    "inputSchemaHash",
    "requestedOutputHash",
    "capabilityManifestHash",
    "validationHash",
)


def _runtime_lock(version: WorkflowVersion) -> bool:
    lock = version.lock
    return (
        lock.get("workflowVersionId") == version.id
        and all(str(lock.get(key, "")).startswith("sha256:") for key in _LOCK_HASHES)
        and "plannedInputStructure" in lock
    )


# -- the brief ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReuseBrief:
    """What the planner reads about the candidate, its hash, and the warnings in it."""

    text: str
    brief_hash: str
    warnings: tuple[str, ...]


def planning_snapshot(requested: Mapping[str, Any], lock: Mapping[str, Any]) -> dict[str, Any]:
    """The fields upstream's planning-definition snapshot compares, from what a run records:
    its ``OrchestrationRequested`` payload and a lock (the version's, or the request's)."""
    return {
        "description": requested.get("description", ""),
        "inputSchema": {"hash": lock.get("inputSchemaHash")},
        "requestedOutputHash": lock.get("requestedOutputHash"),
        "modelSlots": lock.get("modelSlots"),
        "plannerVisibleToolsHash": sha256_digest(lock.get("tools") or []),
    }


_WARNINGS: Final = (
    ("description changed", ("description",)),
    ("input schema hash changed", ("inputSchema", "hash")),
    ("requested output hash changed", ("requestedOutputHash",)),
    ("model slots changed", ("modelSlots",)),
    ("planner-visible tools changed", ("plannerVisibleToolsHash",)),
)


def _at(value: Any, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def snapshot_warnings(prior: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Upstream's warnings: each compared field that changed, in upstream's order."""
    warnings = []
    for warning, path in _WARNINGS:
        before, after = _at(prior, path), _at(current, path)
        if before is None and after is None:
            continue
        if sha256_digest(before) != sha256_digest(after):
            warnings.append(warning)
    return warnings


def _mermaid(version: WorkflowVersion) -> str:
    ids: list[str] = []

    def collect(steps: Any) -> None:
        for step in steps if isinstance(steps, list) else []:
            if isinstance(step, Mapping):
                if isinstance(step.get("id"), str):
                    ids.append(step["id"])
                collect(step.get("steps"))

    collect(version.lwir.get("steps"))
    if not ids:
        return 'graph TD\n  empty["(no steps)"]'
    lines = ["graph TD"]
    for index, step_id in enumerate(ids):
        label = step_id.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'  n{index}["{label}"]')
        if index:
            lines.append(f"  n{index - 1} --> n{index}")
    return "\n".join(lines)


def reuse_brief(
    candidate: ReuseCandidate, current: Mapping[str, Any] | None, *, root: str = MOUNTED_ROOT
) -> ReuseBrief:
    """Upstream's ``buildReuseBrief``: the brief's text (warnings against ``current``, the
    running request's planning snapshot) and its hash."""
    base = f"{root.rstrip('/')}/{candidate.workflow_version_id}"
    prior = planning_snapshot(candidate.requested, candidate.version.lock)
    warnings = snapshot_warnings(prior, current) if current is not None else []
    text = "\n".join(
        [
            "# Planner Reuse Candidate",
            "",
            f"Candidate WorkflowVersion: {candidate.workflow_version_id}",
            f"Workflow ID: {candidate.workflow_id}",
            f"Run ID: {candidate.run_id}",
            f"Completed At: {candidate.completed_at}",
            "",
            "## Step Graph",
            "",
            "```mermaid",
            _mermaid(candidate.version),
            "```",
            "",
            "## Mounted Details",
            "",
            f"- LWIR: {base}/lwir.json",
            f"- Lock: {base}/lock.json",
            f"- Planning definition snapshot: {base}/planning-definition-snapshot.json",
            f"- Prior input summary: {base}/prior-input-summary.md",
            f"- Prior output summary: {base}/prior-output-summary.md",
            f"- Feedback summary: {base}/feedback-summary.md",
            "",
            "## Warnings",
            "",
            *([f"- {warning}" for warning in warnings] or ["- none"]),
            "",
        ]
    )
    return ReuseBrief(text, sha256_digest(text), tuple(warnings))


#: How the planner answers a brief (little-dist's addendum: upstream leaves it to the
#: planner's system prompt and skills; without it a model cannot know the decision shape).
DECISION_INSTRUCTIONS: Final = """\
A previously compiled WorkflowVersion of this workflow is described above. Decide, and reply \
with one JSON object:
- {"kind": "reuse_unchanged", "workflowVersionId": "<candidate id>", "rationale": "...", \
"acknowledgedWarnings": [<every warning listed above>]} to run the candidate as it is;
- {"kind": "adapt", "baseWorkflowVersionId": "<candidate id>", "rationale": "...", \
"lwir": {<the whole adapted LWIR>}} to change it;
- {"kind": "draft_fresh", "rationale": "...", "lwir": {<a whole new LWIR>}} to start over."""


def reuse_blocks(
    candidate: ReuseCandidate,
    current_lock: Mapping[str, Any],
    *,
    tools: Sequence[str],
    models: Sequence[str],
) -> list[str]:
    """What forbids ``reuse_unchanged`` of ``candidate`` now (upstream's
    ``plannerReuseDecisionBlocks``): a changed requested output contract, a tool or model
    slot its LWIR uses that the workflow no longer offers."""
    blocks: list[str] = []
    prior = candidate.version.lock.get("requestedOutputHash")
    if prior is not None and prior != current_lock.get("requestedOutputHash"):
        blocks.append("requested output contract changed")
    permissions = candidate.version.lwir.get("permissions")
    permissions = permissions if isinstance(permissions, Mapping) else {}
    for name in permissions.get("tools") or []:
        if name not in tools:
            blocks.append(f"tool '{name}' unavailable")
    for slot in permissions.get("models") or []:
        if slot not in models:
            blocks.append(f"model '{slot}' unavailable")
    return list(dict.fromkeys(blocks))


# -- the decision ------------------------------------------------------------------------------


def _rationale(decision: Mapping[str, Any]) -> str:
    value = decision.get("rationale")
    if not isinstance(value, str) or not value.strip():
        raise ReuseDecisionError("Planner reuse decision rationale must be a non-empty string.")
    return value


def _candidate(candidates: Sequence[ReuseCandidate], version_id: str) -> None:
    if not any(item.workflow_version_id == version_id for item in candidates):
        raise ReuseDecisionError(
            f"Planner reuse decision references a missing candidate: {version_id}"
        )


def _lwir(decision: Mapping[str, Any]) -> Any:
    if decision.get("lwir") is None:
        raise ReuseDecisionError("Planner reuse decision lwir is required.")
    findings = validate_lwir(decision["lwir"])
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        detail = "; ".join(f"{f.path}: {f.message}" for f in errors)
        raise ReuseDecisionError(f"Invalid planner reuse decision LWIR: {detail}")
    return decision["lwir"]


def validate_reuse_decision(
    decision: Any,
    candidates: Sequence[ReuseCandidate],
    *,
    warnings: Sequence[str] = (),
    blocks: Sequence[str] = (),
) -> dict[str, Any]:
    """Upstream's ``validatePlannerReuseDecision``: the decision, normalized, or
    :class:`ReuseDecisionError` with upstream's message."""
    if not isinstance(decision, Mapping) or decision.get("kind") not in DECISION_KINDS:
        raise ReuseDecisionError("Malformed planner reuse decision.")
    kind = decision["kind"]
    if kind == "reuse_unchanged":
        version_id = decision.get("workflowVersionId")
        if not isinstance(version_id, str):
            raise ReuseDecisionError(
                "Malformed planner reuse decision: workflowVersionId is required."
            )
        rationale = _rationale(decision)
        _candidate(candidates, version_id)
        if blocks:
            raise ReuseDecisionError(f"reuse_unchanged is blocked: {'; '.join(blocks)}")
        acknowledged = decision.get("acknowledgedWarnings")
        if acknowledged is not None and (
            not isinstance(acknowledged, list) or not all(isinstance(w, str) for w in acknowledged)
        ):
            raise ReuseDecisionError(
                "Malformed planner reuse decision: acknowledgedWarnings must be strings."
            )
        if warnings and (acknowledged is None or any(w not in acknowledged for w in warnings)):
            raise ReuseDecisionError(
                f"reuse_unchanged must acknowledge candidate warnings: {'; '.join(warnings)}"
            )
        normalized: dict[str, Any] = {
            "kind": kind,
            "workflowVersionId": version_id,
            "rationale": rationale,
        }
        if acknowledged is not None:
            normalized["acknowledgedWarnings"] = list(acknowledged)
        return normalized
    if kind == "adapt":
        base = decision.get("baseWorkflowVersionId")
        if not isinstance(base, str):
            raise ReuseDecisionError(
                "Malformed planner reuse decision: baseWorkflowVersionId is required."
            )
        rationale = _rationale(decision)
        _candidate(candidates, base)
        return {
            "kind": kind,
            "baseWorkflowVersionId": base,
            "rationale": rationale,
            "lwir": _lwir(decision),
        }
    rationale = _rationale(decision)
    return {"kind": kind, "rationale": rationale, "lwir": _lwir(decision)}


def decision_payload(
    decision: Mapping[str, Any],
    run_input: Any,
    *,
    brief_hash: str | None,
    resulting_version_id: str,
) -> dict[str, Any]:
    """``PlannerReuseDecisionRecorded``'s payload (upstream's
    ``plannerReuseDecisionRecordedPayload``)."""
    payload: dict[str, Any] = {
        "decisionKind": decision["kind"],
        "rationale": decision["rationale"],
        "inputHash": sha256_digest(run_input),
        "inputStructure": concrete_input_structure(run_input),
    }
    if brief_hash is not None:
        payload["candidateBriefHash"] = brief_hash
    payload["resultingWorkflowVersionId"] = resulting_version_id
    if decision["kind"] == "reuse_unchanged":
        payload["candidateWorkflowVersionId"] = decision["workflowVersionId"]
        payload["acknowledgedWarnings"] = list(decision.get("acknowledgedWarnings") or [])
    elif decision["kind"] == "adapt":
        payload["baseWorkflowVersionId"] = decision["baseWorkflowVersionId"]
        payload["candidateWorkflowVersionId"] = decision["baseWorkflowVersionId"]
    return payload
