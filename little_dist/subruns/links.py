"""The links between a parent run and its sub-runs, as recorded in the two logs (pure).

Parent's log (engine events; the run-state fold keeps only what scheduling needs of them,
:mod:`little_dist.run_state._subruns`):

* ``little.subrun.started`` (occurrence ``subrun:{child}``), appended durably before the
  child is started: ``childRunId``, ``workflowId``, ``toolName``, ``toolCallId`` (the
  call's occurrence id, ``tool:{p}:{n}:{k}``, of the attempt that first made the call),
  ``callKey`` (what the child's id is derived from), ``stepPath``, ``attempt``,
  ``inputHash``, ``disposition`` (``await``: the call waits for the child's end);
* ``little.subrun.ended`` (occurrence ``subrun-end:{child}``): ``childRunId``, ``stepPath``
  (the parent's step), ``status`` (``completed`` | ``failed`` | ``cancelled``),
  ``causeCode`` and ``message`` when it did not complete; on the fleet (recorded by the
  scheduler that noticed the child's end) the completed child's ``output`` or
  ``outputRef`` too. The tool call's own ``harness.tool_call.succeeded`` / ``.failed``
  follows with the result the model sees;
* ``little.step.suspended`` (occurrence ``end:{path}:{n}``, the attempt's end): ``stepPath``,
  ``attempt``, ``waitingFor`` (child run ids): the attempt ended waiting for those children
  (on a fleet worker); the step is due again once all of them ended.

Child's log: its ``RunStarted`` carries upstream's ``parentRunId`` plus ``parentToolCallId``,
``parentStepPath`` and ``parentCallKey``.

The child's run id is derived from the call's memo key (parent run, step path, model turn,
call index, tool name, arguments digest): every attempt of the parent's step that makes the
same call (a retry replays the model turns from the memo, so it does) names the same child,
so a retry finds the child instead of starting another.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from little_dist.canonical import sha256_digest
from little_dist.event_types.engine import STEP_SUSPENDED, SUB_RUN_ENDED, SUB_RUN_STARTED
from little_dist.ids import SUB_RUN_ID_PREFIX

__all__ = [
    "STEP_SUSPENDED",
    "SUB_RUN_ENDED",
    "SUB_RUN_ID_PREFIX",
    "SUB_RUN_STARTED",
    "ParentLink",
    "SubRunStart",
    "call_key",
    "child_run_id",
    "parent_link_of",
    "sub_run_ends",
    "sub_run_starts",
]


def call_key(
    parent_run_id: str,
    step_path: str,
    turn: int | None,
    call_index: int,
    tool_name: str,
    args_hash: str,
) -> str:
    """The digest naming one tool call across the attempts of its step (its memo key)."""
    return sha256_digest(
        {
            "kind": "little-dist.sub-run",
            "version": 1,
            "parentRunId": parent_run_id,
            "stepPath": step_path,
            "turn": turn or 0,
            "callIndex": call_index,
            "toolName": tool_name,
            "argsHash": args_hash,
        }
    )


def child_run_id(key: str) -> str:
    """The sub-run's id for the call ``key`` (:func:`call_key`): ``run_sub_`` + 32 hex."""
    digest = key.split(":", 1)[-1]
    return f"{SUB_RUN_ID_PREFIX}{digest[:32]}"


@dataclass(frozen=True)
class ParentLink:
    """What a child records of its parent, in its ``RunStarted``."""

    parent_run_id: str
    tool_call_id: str
    step_path: str
    call_key: str

    def to_payload(self) -> dict[str, Any]:
        return {
            "parentRunId": self.parent_run_id,
            "parentToolCallId": self.tool_call_id,
            "parentStepPath": self.step_path,
            "parentCallKey": self.call_key,
        }


@dataclass(frozen=True)
class SubRunStart:
    """One ``little.subrun.started`` of a parent's log."""

    child_run_id: str
    workflow_id: str
    tool_name: str
    tool_call_id: str
    step_path: str

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> SubRunStart | None:
        fields: list[str] = []
        for name in ("childRunId", "workflowId", "toolName", "toolCallId", "stepPath"):
            value = payload.get(name)
            if not isinstance(value, str) or not value:
                return None
            fields.append(value)
        return cls(*fields)


def _type_and_payload(event: Any) -> tuple[Any, Any]:
    if isinstance(event, Mapping):
        return event.get("type"), event.get("payload")
    return getattr(event, "type", None), getattr(event, "payload", None)


def parent_link_of(events: Iterable[Any]) -> dict[str, str] | None:
    """The parent link a run's ``RunStarted`` records (``parentRunId``, ...), or ``None``
    for a run no other run started."""
    for event in events:
        kind, payload = _type_and_payload(event)
        if kind == "RunStarted" and isinstance(payload, Mapping):
            parent = payload.get("parentRunId")
            if not isinstance(parent, str):
                return None
            return {
                key: value
                for key in ("parentRunId", "parentToolCallId", "parentStepPath", "parentCallKey")
                if isinstance(value := payload.get(key), str)
            }
    return None


def sub_run_starts(events: Iterable[Any]) -> list[SubRunStart]:
    """The sub-runs a parent's log records as started, in order, once each."""
    found: dict[str, SubRunStart] = {}
    for event in events:
        kind, payload = _type_and_payload(event)
        if kind == SUB_RUN_STARTED and isinstance(payload, Mapping):
            start = SubRunStart.from_payload(payload)
            if start is not None:
                found.setdefault(start.child_run_id, start)
    return list(found.values())


def sub_run_ends(events: Iterable[Any]) -> dict[str, Mapping[str, Any]]:
    """``little.subrun.ended`` payloads of a parent's log, by child run id."""
    ends: dict[str, Mapping[str, Any]] = {}
    for event in events:
        kind, payload = _type_and_payload(event)
        if kind == SUB_RUN_ENDED and isinstance(payload, Mapping):
            child = payload.get("childRunId")
            if isinstance(child, str):
                ends.setdefault(child, payload)
    return ends
