"""``validate_lwir``: every problem with an LWIR v0.1 document, as upstream's findings.

Phases, in upstream's order (findings come out in this order too):

1. hashability: the document must have a canonical JSON form (``lwir.non_hashable``);
2. top-level shape and ``permissions``;
3. the input and output schemas (the alpha JSON Schema subset);
4. each step list, depth first: ids, ``needs``, per-step checks (nested parallel bodies are
   checked where their parent is), then references, deadlocks and cycles of the list;
5. the top-level list has exactly one terminal step.

The checks run on ``JSON.parse(canonicalJson(doc))`` as upstream's do, so JavaScript's view
of the values (``2.0`` is an integer, keys iterate in its order) holds throughout.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from little_dist.lwir._js import MISSING, is_record, js_clone
from little_dist.lwir.expression_checks import (
    StepRef,
    step_references_in,
    validate_expressions,
)
from little_dist.lwir.findings import Finding, error, unimplemented_field
from little_dist.lwir.flow_checks import (
    validate_decision_config,
    validate_parallel_config,
    validate_parallel_output_schema,
)
from little_dist.lwir.models import LwirDocument
from little_dist.lwir.permissions import (
    Allowlists,
    allowlists_for,
    check_ai_model,
    check_tool,
    validate_permissions,
)
from little_dist.lwir.schema import validate_schema_value
from little_dist.lwir.step_checks import (
    STEP_TYPES,
    validate_code_run,
    validate_max_visits,
    validate_on_failure,
    validate_output,
    validate_sensitive,
)
from little_dist.lwir.structure import (
    can_reach,
    execution_flow_edges,
    is_multi_visit,
    validate_cycles,
    validate_decision_deadlocks,
    validate_terminal_steps,
)

__all__ = ["API_VERSION", "KIND", "validate_lwir", "validated_clone"]

API_VERSION: Final = "littleworkflow.dev/v0.1"
KIND: Final = "Workflow"
# '.', '[' and ']' delimit step paths; '@attempt_' marks retries in them.
_PATH_DELIMITER = re.compile(r"[.\[\]]")
_ATTEMPT_MARKER: Final = "@attempt_"
# Back-edge reads of a loop: legal without `needs` when the read step can reach the reader.
_LOOP_PROPERTIES: Final = ("lastOutput", "allVisits")


@dataclass(frozen=True, slots=True)
class _KnownStep:
    step: dict[str, Any]
    path: str


@dataclass(frozen=True, slots=True)
class _Scope:
    allow: Allowlists
    in_branch: bool = False
    external: Mapping[str, _KnownStep] = field(default_factory=dict)
    local: Mapping[str, _KnownStep] = field(default_factory=dict)


def validate_lwir(doc: Any) -> list[Finding]:
    """Validate an LWIR document (a JSON value); return every finding (empty means valid).

    Never raises: any input, including non-dicts and unhashable values, yields findings.
    """
    return validated_clone(doc)[0]


def validated_clone(doc: Any) -> tuple[list[Finding], Any]:
    """The findings for ``doc`` and its JSON clone (``None`` when it is not hashable).

    An :class:`LwirDocument` is checked as the JSON it was parsed from.
    """
    if isinstance(doc, LwirDocument):
        doc = doc.model_dump(by_alias=True, exclude_unset=True)
    try:
        clone = js_clone(doc)
    except RecursionError:
        return [error("lwir.non_hashable", "$", "LWIR is nested too deeply to hash.")], None
    except Exception as exc:  # NonHashableValueError and anything a foreign object raises
        return [error("lwir.non_hashable", "$", str(exc) or "LWIR is not hashable.")], None
    findings: list[Finding] = []
    try:
        _validate_document(clone, findings)
    except RecursionError:
        findings.append(
            error("schema.invalid", "$", "LWIR document is nested too deeply to validate.")
        )
    return findings, clone


def _validate_document(doc: Any, findings: list[Finding]) -> None:
    if not is_record(doc):
        findings.append(error("schema.invalid", "$", "LWIR document must be an object."))
        return
    _validate_top_level(doc, findings)
    for key in ("input", "output"):
        holder = doc.get(key)
        if is_record(holder) and "schema" in holder:
            validate_schema_value(holder["schema"], f"$.{key}.schema", findings)
    steps = doc.get("steps")
    if type(steps) is list:
        _validate_step_list(steps, "$.steps", findings, _Scope(allowlists_for(doc)))
        validate_terminal_steps(steps, "$.steps", findings)


def _validate_top_level(doc: dict[str, Any], findings: list[Finding]) -> None:
    if doc.get("apiVersion", MISSING) != API_VERSION:
        findings.append(
            error("schema.invalid", "$.apiVersion", f"apiVersion must be {API_VERSION}.")
        )
    if doc.get("kind", MISSING) != KIND:
        findings.append(error("schema.invalid", "$.kind", f"kind must be {KIND}."))
    metadata = doc.get("metadata")
    if not is_record(metadata):
        findings.append(error("schema.invalid", "$.metadata", "metadata is required."))
    elif type(metadata.get("name")) is not str or not metadata["name"]:
        findings.append(error("schema.invalid", "$.metadata.name", "metadata.name is required."))
    for key in ("input", "output"):
        holder = doc.get(key)
        if not is_record(holder) or "schema" not in holder:
            findings.append(error("schema.invalid", f"$.{key}", f"{key}.schema is required."))
    if type(doc.get("steps")) is not list:
        findings.append(error("schema.invalid", "$.steps", "steps must be an array."))
    if "permissions" in doc:
        validate_permissions(doc["permissions"], findings)


def _step_id_problem(step_id: Any) -> str | None:
    if type(step_id) is not str or not step_id:
        return "Step id is required."
    if _PATH_DELIMITER.search(step_id):
        return "Step id must not contain a reserved path delimiter: '.', '[', or ']'."
    if _ATTEMPT_MARKER in step_id:
        return "Step id must not contain reserved retry path marker '@attempt_N'."
    return None


def _declared_steps(steps: Sequence[Any], path: str) -> dict[str, _KnownStep]:
    """The steps of a list that later checks can resolve: valid ids, first occurrence."""
    declared: dict[str, _KnownStep] = {}
    for index, step in enumerate(steps):
        if is_record(step) and _step_id_problem(step.get("id")) is None:
            declared.setdefault(step["id"], _KnownStep(step, f"{path}[{index}]"))
    return declared


def _validate_needs(step: dict[str, Any], step_path: str, findings: list[Finding]) -> list[str]:
    needs = step.get("needs", MISSING)
    if needs is MISSING:
        return []
    if type(needs) is not list:
        findings.append(
            error("step.invalid_needs", f"{step_path}.needs", "Needs must be an array.")
        )
        return []
    valid: list[str] = []
    for index, need in enumerate(needs):
        if type(need) is not str or not need:
            findings.append(
                error(
                    "step.invalid_needs",
                    f"{step_path}.needs[{index}]",
                    "Step dependency must be a non-empty string.",
                )
            )
            continue
        valid.append(need)
    return valid


def _validate_step_list(
    steps: Sequence[Any], path: str, findings: list[Finding], scope: _Scope
) -> None:
    indexes: dict[str, int] = {}
    steps_by_id: dict[str, dict[str, Any]] = {}
    needs_by_id: dict[str, list[str]] = {}
    references_by_id: dict[str, list[StepRef]] = {}
    scope = replace(scope, local=_declared_steps(steps, path))

    for index, step in enumerate(steps):
        step_path = f"{path}[{index}]"
        if not is_record(step):
            findings.append(error("step.invalid", step_path, "Step must be an object."))
            continue
        problem = _step_id_problem(step.get("id"))
        if problem is not None:
            findings.append(error("step.invalid_id", f"{step_path}.id", problem))
            continue
        step_id: str = step["id"]
        duplicate = step_id in indexes
        if duplicate:
            findings.append(
                error("step.duplicate_id", f"{step_path}.id", f"Duplicate step id '{step_id}'.")
            )
        else:
            indexes[step_id] = index
            steps_by_id[step_id] = step
        needs = _validate_needs(step, step_path, findings)
        if not duplicate:
            needs_by_id[step_id] = needs
            references_by_id[step_id] = step_references_in(
                step.get("with"), f"{step_path}.with"
            ) + step_references_in(step.get("input"), f"{step_path}.input")
        _validate_step(step, step_path, findings, scope)

    outgoing = execution_flow_edges(steps_by_id, needs_by_id)
    for step_id, needs in needs_by_id.items():
        _check_dependencies(
            step_id,
            needs,
            references_by_id[step_id],
            path,
            indexes,
            steps_by_id,
            outgoing,
            scope,
            findings,
        )
    validate_decision_deadlocks(steps_by_id, needs_by_id, indexes, path, findings)
    validate_cycles(steps_by_id, outgoing, path, findings)


def _check_dependencies(
    step_id: str,
    needs: list[str],
    references: list[StepRef],
    path: str,
    indexes: Mapping[str, int],
    steps_by_id: Mapping[str, dict[str, Any]],
    outgoing: dict[str, dict[str, None]],
    scope: _Scope,
    findings: list[Finding],
) -> None:
    step_index = indexes[step_id]
    for index, need in enumerate(needs):
        if need not in indexes and need not in scope.external:
            findings.append(
                error(
                    "step.missing_dependency",
                    f"{path}[{step_index}].needs[{index}]",
                    f"Step '{step_id}' depends on missing step '{need}'.",
                )
            )
    declared = set(needs)
    for reference in references:
        target_id = reference.step_id
        external = scope.external.get(target_id)
        if target_id not in indexes and external is None:
            findings.append(
                error(
                    "step.missing_dependency",
                    reference.path,
                    f"Step '{step_id}' references missing step '{target_id}'.",
                )
            )
            continue
        if target_id not in declared and not (
            reference.property in _LOOP_PROPERTIES and can_reach(target_id, step_id, outgoing)
        ):
            findings.append(
                error(
                    "step.undeclared_dependency",
                    reference.path,
                    f"Step '{step_id}' references '{target_id}' without declaring it in needs.",
                )
            )
        local = steps_by_id.get(target_id)
        target = local if local is not None else external.step if external else None
        if target is None:
            continue
        if _json_output_needs_schema(target):
            target_path = (
                f"{path}[{indexes[target_id]}]"
                if target_id in indexes
                else (external.path if external else "undefined")
            )
            findings.append(
                error(
                    "output.missing_schema",
                    f"{target_path}.output.schema",
                    f"Referenced json output from step '{target_id}' requires schema.",
                )
            )
        if reference.property == "output" and is_multi_visit(target):
            findings.append(
                error(
                    "lwir.output_ambiguous_for_multi_visit",
                    reference.path,
                    f"Step '{step_id}' uses '{{{{ steps.{target_id}.output }}}}' but step "
                    f"'{target_id}' has maxVisits > 1. Use 'lastOutput' or 'allVisits' instead.",
                )
            )


def _json_output_needs_schema(step: dict[str, Any]) -> bool:
    output = step.get("output")
    return is_record(output) and output.get("mode") == "json" and "schema" not in output


def _validate_step(
    step: dict[str, Any], step_path: str, findings: list[Finding], scope: _Scope
) -> None:
    uses = step.get("uses")
    step_type = uses if type(uses) is str and uses in STEP_TYPES else None
    if step_type is None:
        findings.append(
            error("step.invalid_type", f"{step_path}.uses", "Unsupported alpha step type.")
        )
    if step_type == "parallel" and scope.in_branch:
        findings.append(
            error(
                "parallel.nested_unsupported",
                f"{step_path}.uses",
                "Nested parallel steps are not supported in alpha.",
            )
        )
    if "cache" in step:
        findings.append(unimplemented_field("steps[].cache", f"{step_path}.cache"))

    output_mode = None
    if step_type != "decision":
        output_mode = validate_output(step.get("output", MISSING), f"{step_path}.output", findings)
    elif "output" in step:
        findings.append(
            error(
                "decision.output_not_allowed",
                f"{step_path}.output",
                "A decision step routes execution and cannot declare an output contract — its "
                "result is always { chosen: <target> }. Remove `output` from this step and "
                "produce the workflow output in a later non-decision step.",
            )
        )
    if step_type not in ("parallel", "decision") and "with" in step:
        validate_expressions(
            step["with"], f"{step_path}.with", findings, allow_item_expressions=scope.in_branch
        )
    if "input" in step:
        validate_expressions(
            step["input"], f"{step_path}.input", findings, allow_item_expressions=scope.in_branch
        )
    validate_sensitive(step, step_path, findings)
    validate_max_visits(step, step_path, findings)
    if step_type is None:
        return

    config = step.get("with")
    if step_type == "ai.generate":
        check_ai_model(config, step_path, scope.allow, findings)
    elif step_type == "tool.call":
        check_tool(config, step_path, scope.allow, findings)
    elif step_type == "code.run":
        validate_code_run(step, step_path, findings)
    elif step_type == "decision":
        validate_decision_config(step, step_path, scope.local, scope.in_branch, findings)
    validate_on_failure(step, step_path, step_type, scope.allow, findings)
    if step_type == "parallel" and output_mode is not None and output_mode != "array":
        findings.append(
            error(
                "output.invalid_for_step",
                f"{step_path}.output.mode",
                "parallel output must use array mode.",
            )
        )
    if step_type == "parallel":
        if validate_parallel_config(step, step_path, scope.in_branch, findings):
            _validate_branch(step, step_path, findings, scope)
        validate_parallel_output_schema(step, step_path, findings)


def _validate_branch(
    step: dict[str, Any], step_path: str, findings: list[Finding], scope: _Scope
) -> None:
    """A parallel body: its own scope, which also sees the parent's declared ``needs``."""
    body = step.get("steps")
    if type(body) is not list or not body:
        findings.append(
            error("parallel.missing_steps", f"{step_path}.steps", "Parallel steps are required.")
        )
        return
    parent_needs = step.get("needs")
    external = dict(scope.external)
    if type(parent_needs) is list:
        for need in parent_needs:
            known = scope.local.get(need) if type(need) is str else None
            if known is not None:
                external.setdefault(need, known)
    _validate_step_list(
        body, f"{step_path}.steps", findings, replace(scope, in_branch=True, external=external)
    )
