"""The outer-loop manifest (upstream's ``OuterLoopManifest``) and the checks a resume makes
of it (pure: no IO, no clock).

Its JSON shape is upstream's, byte for byte (canonical JSON, as ``world.ts`` writes
``<dataDir>/outer-loops/{outerLoopId}.json``)::

    {"outerLoopId": "ol_...",
     "goal": {"workflowDefinitionHash": "sha256:...", "description": "..."},
     "maxCycles": 3,
     "cycles": [{"cycleNumber": 1, "runId": "run_...", "workflowVersionId": "wfver_...",
                 "status": "completed" | "failed", "output": ..., "summary": "..."?}],
     "result": {"kind": "done", "finalOutput": ...}?,      once the supervisor said done
     "pendingCycleRunId": "run_..."?}                      while a cycle is under way

``summary`` is the supervisor's ``promptNote`` for that cycle (what the next plan is told).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from little_dist.canonical import canonical_json
from little_dist.errors import InvalidInputError
from little_dist.ids import OUTER_LOOP_ID_PREFIX

__all__ = [
    "OUTER_LOOP_ID_PATTERN",
    "CycleSummary",
    "OuterLoopGoal",
    "OuterLoopManifest",
    "config_problem",
    "manifest_from_json",
    "manifest_text",
    "parse_manifest_text",
    "validate_outer_loop_id",
]

#: Upstream's ``OUTER_LOOP_ID_PATTERN``.
OUTER_LOOP_ID_PATTERN: Final = re.compile(rf"^{OUTER_LOOP_ID_PREFIX}[A-Za-z0-9_-]{{1,80}}$")

CycleStatus = Literal["completed", "failed"]


def validate_outer_loop_id(outer_loop_id: Any) -> str:
    """``outer_loop_id`` if it is one (``ol_`` + 1-80 of ``[A-Za-z0-9_-]``), else
    :class:`InvalidInputError` naming it."""
    if not isinstance(outer_loop_id, str) or not OUTER_LOOP_ID_PATTERN.fullmatch(outer_loop_id):
        raise InvalidInputError(
            f"Invalid outer-loop id: {outer_loop_id!r} (expected 'ol_' and 1-80 of A-Za-z0-9_-)"
        )
    return outer_loop_id


@dataclass(frozen=True)
class OuterLoopGoal:
    """What the loop is for: the workflow's definition hash and description."""

    workflow_definition_hash: str
    description: str

    def to_json(self) -> dict[str, Any]:
        return {
            "workflowDefinitionHash": self.workflow_definition_hash,
            "description": self.description,
        }


@dataclass(frozen=True)
class CycleSummary:
    """One finished cycle (upstream's ``OuterLoopCycleSummary``)."""

    cycle_number: int
    run_id: str
    workflow_version_id: str
    status: CycleStatus
    output: Any = None
    summary: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "cycleNumber": self.cycle_number,
            "runId": self.run_id,
            "workflowVersionId": self.workflow_version_id,
            "status": self.status,
            "output": self.output,
        }
        if self.summary is not None:
            data["summary"] = self.summary
        return data


@dataclass(frozen=True)
class OuterLoopManifest:
    """The per-loop manifest (see the module docstring). ``done`` is whether ``result`` is
    set; ``final_output`` its ``finalOutput``."""

    outer_loop_id: str
    goal: OuterLoopGoal
    max_cycles: int
    cycles: tuple[CycleSummary, ...] = ()
    done: bool = False
    final_output: Any = None
    pending_cycle_run_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "outerLoopId": self.outer_loop_id,
            "goal": self.goal.to_json(),
            "maxCycles": self.max_cycles,
            "cycles": [cycle.to_json() for cycle in self.cycles],
        }
        if self.done:
            data["result"] = {"kind": "done", "finalOutput": self.final_output}
        if self.pending_cycle_run_id is not None:
            data["pendingCycleRunId"] = self.pending_cycle_run_id
        return data


def manifest_text(manifest: OuterLoopManifest) -> str:
    """The stored form: canonical JSON and a newline, as upstream writes it."""
    return canonical_json(manifest.to_json()) + "\n"


def _field(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InvalidInputError(f"{where}: field {key!r} is missing or not a {_kind_name(kind)}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(
        {str: "string", int: "integer", list: "list", dict: "object"}[k] for k in kinds
    )


def _cycle_from_json(data: Any, where: str) -> CycleSummary:
    if not isinstance(data, Mapping):
        raise InvalidInputError(f"{where}: not an object")
    status = data.get("status")
    if status not in ("completed", "failed"):
        raise InvalidInputError(f"{where}: status {status!r} is not 'completed' or 'failed'")
    summary = data.get("summary")
    if summary is not None and not isinstance(summary, str):
        raise InvalidInputError(f"{where}: summary is not a string")
    return CycleSummary(
        cycle_number=_field(data, "cycleNumber", int, where),
        run_id=_field(data, "runId", str, where),
        workflow_version_id=_field(data, "workflowVersionId", str, where),
        status=status,
        output=data.get("output"),
        summary=summary,
    )


def manifest_from_json(data: Any, where: str) -> OuterLoopManifest:
    """The manifest in ``data`` (its stored JSON, parsed); :class:`InvalidInputError` naming
    ``where`` and the field when it is not one."""
    if not isinstance(data, Mapping):
        raise InvalidInputError(f"{where}: an outer-loop manifest must be a JSON object")
    goal = _field(data, "goal", dict, where)
    result = data.get("result")
    if result is not None and (not isinstance(result, Mapping) or result.get("kind") != "done"):
        raise InvalidInputError(f"{where}: result must be {{'kind': 'done', 'finalOutput': ...}}")
    pending = data.get("pendingCycleRunId")
    if pending is not None and not isinstance(pending, str):
        raise InvalidInputError(f"{where}: pendingCycleRunId is not a string")
    cycles = _field(data, "cycles", list, where)
    return OuterLoopManifest(
        outer_loop_id=validate_outer_loop_id(_field(data, "outerLoopId", str, where)),
        goal=OuterLoopGoal(
            workflow_definition_hash=_field(goal, "workflowDefinitionHash", str, f"{where} goal"),
            description=_field(goal, "description", str, f"{where} goal"),
        ),
        max_cycles=_field(data, "maxCycles", int, where),
        cycles=tuple(
            _cycle_from_json(item, f"{where} cycles[{index}]") for index, item in enumerate(cycles)
        ),
        done=result is not None,
        final_output=None if result is None else result.get("finalOutput"),
        pending_cycle_run_id=pending,
    )


def parse_manifest_text(text: str, where: str) -> OuterLoopManifest:
    """:func:`manifest_from_json` of stored text."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        raise InvalidInputError(f"{where}: not JSON: {error}") from error
    return manifest_from_json(data, where)


def config_problem(
    existing: OuterLoopManifest, *, max_cycles: int, workflow_definition_hash: str
) -> str | None:
    """Why a loop recorded as ``existing`` cannot be resumed by a caller passing
    ``max_cycles`` for the workflow of ``workflow_definition_hash`` (upstream's one-line
    ``runtime_config_error`` messages); ``None`` when it can."""
    loop_id = existing.outer_loop_id
    if existing.max_cycles != max_cycles:
        return (
            f"runtime_config_error: outer_loop_max_cycles_mismatch — existing outer loop "
            f"'{loop_id}' was started with maxCycles={existing.max_cycles}, caller now passed "
            f"maxOuterCycles={max_cycles}."
        )
    recorded = existing.goal.workflow_definition_hash
    if recorded != workflow_definition_hash:
        return (
            f"runtime_config_error: outer_loop_goal_mismatch — existing outer loop '{loop_id}' "
            f"was started with workflowDefinitionHash={recorded}, caller now passed "
            f"{workflow_definition_hash}."
        )
    if existing.done and not existing.cycles:
        return (
            f"runtime_config_error: outer_loop_manifest_corrupt — existing outer loop "
            f"'{loop_id}' has result.kind='done' but cycles is empty."
        )
    return None
