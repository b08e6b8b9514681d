"""``lwir-input-cone@v1`` (upstream's ``lwir-input-cone.ts``): a hash of what can reach one
step's input, so an eval item authored against that step can tell, without running
anything, whether a new version of the workflow still tests the same thing.

The cone of step ``S`` is ``S`` plus, transitively, every step that influences it: the ids
in ``needs``, the steps its ``with`` / ``input`` / ``cache`` read through ``{{ steps.X }}``
(also inside a ``parallel`` step's branch bodies, and ``lastOutput`` back-edges that need no
``needs``), and every ``decision`` that routes to it. Each member is hashed whole (``needs``
as a sorted set), beside the document minus ``metadata`` and ``steps``: a step field or a
top-level key added to LWIR later is in the hash by default, because keeping a stale eval
item alive is the unrecoverable direction. A cone member that reads the ``workflow`` or
``step`` expression root, or holds a string the expression scanner cannot read, makes the
whole document the cone (``scope: "whole-document"``). Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from little_dist.canonical import canonical_json, sha256_digest
from little_dist.errors import InvalidInputError, LittleError
from little_dist.lwir.expression_checks import (
    contains_unscannable_expression,
    references_expression_root,
    step_reference_ids_in,
)

__all__ = [
    "LWIR_INPUT_CONE_ALGORITHM",
    "InputCone",
    "LwirInputConeError",
    "input_cone_hash",
    "input_cone_snapshot",
]

LWIR_INPUT_CONE_ALGORITHM: Final = "lwir-input-cone@v1"
_EXPRESSION_FIELDS: Final = ("with", "input", "cache")
_ENVELOPE_OMITTED: Final = ("metadata", "steps")

ConeErrorCode = Literal[
    "invalid_lwir",
    "step_not_found",
    "duplicate_step_id",
    "missing_reference",
    "nested_step_unsupported",
]


class LwirInputConeError(InvalidInputError):
    """No cone can be computed (upstream's codes in ``code``); never a partial result."""

    def __init__(self, code: ConeErrorCode, message: str, step_id: str) -> None:
        super().__init__(message)
        self.code = code
        self.step_id = step_id


@dataclass(frozen=True)
class InputCone:
    """``hash`` (``sha256:<hex>``) of the cone of ``step_id``; ``step_ids`` its members
    sorted by code point (empty for ``whole-document``); ``cyclic`` when the step is in its
    own closure (a decision loop)."""

    algorithm: str
    hash: str
    step_id: str
    scope: Literal["steps", "whole-document"]
    step_ids: tuple[str, ...]
    cyclic: bool


def input_cone_hash(lwir: Any, step_id: str) -> InputCone:
    """The input cone of top-level step ``step_id`` in ``lwir`` (not assumed validated)."""
    snapshot, step_ids, cyclic = _analyze(lwir, step_id)
    return InputCone(
        LWIR_INPUT_CONE_ALGORITHM,
        sha256_digest(snapshot),
        step_id,
        snapshot["scope"],
        step_ids,
        cyclic,
    )


def input_cone_snapshot(lwir: Any, step_id: str) -> dict[str, Any]:
    """The value :func:`input_cone_hash` digests (to explain why two cones differ)."""
    return _analyze(lwir, step_id)[0]


def _analyze(lwir: Any, step_id: str) -> tuple[dict[str, Any], tuple[str, ...], bool]:
    if not isinstance(step_id, str) or not step_id:
        raise LwirInputConeError("step_not_found", "Input cone requires a non-empty step id.", "")
    try:
        import json

        document = json.loads(canonical_json(lwir))
    except LittleError as exc:
        raise LwirInputConeError("invalid_lwir", str(exc), step_id) from None
    if not isinstance(document, dict):
        raise LwirInputConeError("invalid_lwir", "LWIR document must be an object.", step_id)
    steps = document.get("steps")
    if not isinstance(steps, list):
        raise LwirInputConeError("invalid_lwir", "LWIR steps must be an array.", step_id)
    by_id = _index(steps, step_id)
    target = by_id.get(step_id)
    if target is None:
        raise _missing_target(steps, step_id)
    routers = _routers_by_target(by_id)
    visited = {step_id}
    queue = [step_id]
    cyclic = False
    whole = False
    while queue:
        current_id = queue.pop(0)
        current = by_id[current_id]
        whole = whole or _forces_whole_document(current)
        for influencer in [*_scan(current, current_id, by_id), *routers.get(current_id, [])]:
            if influencer == step_id:
                cyclic = True
            if influencer not in visited:
                visited.add(influencer)
                queue.append(influencer)
    snapshot: dict[str, Any]
    if whole:
        snapshot = {
            "algorithm": LWIR_INPUT_CONE_ALGORITHM,
            "scope": "whole-document",
            "stepId": step_id,
            "document": document,
        }
        return snapshot, (), cyclic
    members = tuple(sorted(visited))  # (code-point order, as upstream)
    snapshot = {
        "algorithm": LWIR_INPUT_CONE_ALGORITHM,
        "scope": "steps",
        "stepId": step_id,
        "cyclic": cyclic,
        "workflow": {k: v for k, v in document.items() if k not in _ENVELOPE_OMITTED},
        "target": _project(target),
        "influencers": [_project(by_id[member]) for member in members if member != step_id],
    }
    return snapshot, members, cyclic


def _index(steps: list[Any], step_id: str) -> dict[str, dict[str, Any]]:
    by_id: dict[str, dict[str, Any]] = {}
    for index, step in enumerate(steps):
        if not isinstance(step, dict):
            raise LwirInputConeError(
                "invalid_lwir", f"LWIR step $.steps[{index}] must be an object.", step_id
            )
        own = step.get("id")
        if not isinstance(own, str) or not own:
            raise LwirInputConeError(
                "invalid_lwir",
                f"LWIR step $.steps[{index}].id must be a non-empty string.",
                step_id,
            )
        if own in by_id:
            raise LwirInputConeError(
                "duplicate_step_id",
                f"Duplicate top-level step id '{own}' makes the input cone ambiguous.",
                step_id,
            )
        by_id[own] = step
    return by_id


def _missing_target(steps: list[Any], step_id: str) -> LwirInputConeError:
    nested: set[str] = set()
    pending = list(steps)
    while pending:
        step = pending.pop()
        children = step.get("steps") if isinstance(step, dict) else None
        if isinstance(children, list):
            nested.update(
                c["id"] for c in children if isinstance(c, dict) and isinstance(c.get("id"), str)
            )
            pending.extend(children)
    if step_id in nested:
        return LwirInputConeError(
            "nested_step_unsupported",
            f"Step '{step_id}' is declared inside a parallel branch body. "
            f"{LWIR_INPUT_CONE_ALGORITHM} addresses top-level steps only.",
            step_id,
        )
    return LwirInputConeError(
        "step_not_found", f"Step '{step_id}' is not a top-level step of this workflow.", step_id
    )


def _decision_targets(step: Mapping[str, Any]) -> list[str]:
    config = step.get("with")
    if not isinstance(config, dict):
        return []
    targets = []
    fallback = config.get("default")
    if isinstance(fallback, str) and fallback != "end":
        targets.append(fallback)
    cases = config.get("cases")
    for branch in cases if isinstance(cases, list) else []:
        to = branch.get("to") if isinstance(branch, dict) else None
        if isinstance(to, str) and to != "end":
            targets.append(to)
    return targets


def _routers_by_target(by_id: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    routers: dict[str, list[str]] = {}
    for own, step in by_id.items():
        if step.get("uses") != "decision":
            continue
        for target in _decision_targets(step):
            if target in by_id and own not in routers.setdefault(target, []):
                routers[target].append(own)
    return routers


def _forces_whole_document(step: Mapping[str, Any]) -> bool:
    return (
        references_expression_root(step, "workflow")
        or references_expression_root(step, "step")
        or contains_unscannable_expression(step)
    )


def _scan(step: Mapping[str, Any], own: str, by_id: Mapping[str, Any]) -> list[str]:
    found: dict[str, None] = {}
    for need in _needs(step, own):
        if need not in by_id:
            raise LwirInputConeError(
                "missing_reference",
                f"Step '{own}' declares a dependency on missing step '{need}'.",
                own,
            )
        found[need] = None
    if step.get("uses") == "decision":
        for target in _decision_targets(step):
            if target not in by_id:
                raise LwirInputConeError(
                    "missing_reference",
                    f"Decision step '{own}' routes to missing step '{target}'.",
                    own,
                )
    _subtree(step, own, by_id, [], found)
    return list(found)


def _subtree(
    step: Mapping[str, Any],
    owner: str,
    by_id: Mapping[str, Any],
    scopes: list[set[str]],
    into: dict[str, None],
) -> None:
    """References from ``with``/``input``/``cache`` of ``step`` and of its branch bodies;
    ids of a nested sibling are local, not cone members."""
    if scopes:  # (a top-level step's own needs are read by _scan)
        for need in _needs(step, owner):
            if any(need in scope for scope in scopes):
                continue
            if need not in by_id:
                raise LwirInputConeError(
                    "missing_reference",
                    f"Step '{owner}' declares a branch dependency on missing step '{need}'.",
                    owner,
                )
            into[need] = None
    for field in _EXPRESSION_FIELDS:
        if field not in step:
            continue
        for reference in step_reference_ids_in(step[field]):
            if any(reference in scope for scope in scopes):
                continue
            if reference not in by_id:
                raise LwirInputConeError(
                    "missing_reference",
                    f"Step '{owner}' references missing step '{reference}'.",
                    owner,
                )
            into[reference] = None
    nested = step.get("steps")
    if not isinstance(nested, list):
        return
    scope = {
        c["id"] for c in nested if isinstance(c, dict) and isinstance(c.get("id"), str) and c["id"]
    }
    for child in nested:
        if isinstance(child, dict):
            _subtree(child, owner, by_id, [*scopes, scope], into)


def _needs(step: Mapping[str, Any], own: str) -> list[str]:
    if "needs" not in step:
        return []
    needs = step["needs"]
    if not isinstance(needs, list):
        raise LwirInputConeError("invalid_lwir", f"Step '{own}' has a non-array 'needs'.", own)
    if not all(isinstance(need, str) and need for need in needs):
        raise LwirInputConeError(
            "invalid_lwir", f"Step '{own}' has a 'needs' entry that is not a non-empty string.", own
        )
    return needs


def _project(step: Mapping[str, Any]) -> dict[str, Any]:
    """The step whole, ``needs`` as a sorted set (absent when empty), at every level."""
    projected = dict(step)
    needs = step.get("needs")
    if isinstance(needs, list) and all(isinstance(need, str) for need in needs):
        normalized = sorted(set(needs))
        if normalized:
            projected["needs"] = normalized
        else:
            del projected["needs"]
    nested = step.get("steps")
    if isinstance(nested, list):
        projected["steps"] = [_project(c) if isinstance(c, dict) else c for c in nested]
    return projected
