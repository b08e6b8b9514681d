"""The memo: recorded model turns and tool results a retried attempt reuses.

A step attempt that died (worker killed, lease expired) is retried as attempt ``n+1``; the
model turns and tool calls attempt ``n`` already finished are in the run's event log. Before
every model call and tool call the default harness asks the memo:

* model turns are keyed by ``(turn, promptHash)``: the turn's number within the attempt and
  the digest of the exact request (model, messages, tools). A retried attempt that rebuilds
  the same conversation finds each finished turn and reuses its response without calling the
  provider. The first request that differs (a tool result that changed, an unfinished turn)
  misses, and from there the attempt runs live.
* tool results are keyed by ``(turn, callIndex, toolName, argsHash)`` (``turn`` is 0 for
  calls that no model made, such as a ``tool.call`` step). Only *succeeded* calls are reused:
  a failed tool call runs again on retry, which is what a retry is for.

The memo also keeps, per sub-run the step started (``little.subrun.started``), its
``little.subrun.ended`` payload once recorded: a workflow tool's call on a fleet resumes
from them (:func:`little_dist.subruns.engine.start_elsewhere`).

Likewise, per approval a call of the step asked for (``little.approval.requested``), its
``little.approval.decided`` payload once recorded: a held call resumes from them
(:mod:`little_dist.harness.approval_gate`).

The memo also keeps the capability manifest of the first ``harness.session.started`` of each
session scope (role, and whether the session is a delegated default harness), which a
session that starts again is checked against (:mod:`little_dist.harness.drift`).

Events of every earlier attempt of the step path count, and so do the current attempt's (an
in-process resume of the same attempt). When several match, the latest recorded wins.
A hit is recorded by the harness as ``little.harness.model.memoized`` /
``little.harness.tool_call.memoized`` (see :mod:`little_dist.harness.recorder`); reuse
events themselves are not memo sources. Payloads stored as artifacts (``responseRef``,
``resultRef``) are read back through ``world`` when a hit needs them; without a world such an
entry is treated as a miss.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from little_dist.errors import InvalidInputError, NotFoundError

# The sub-run links a step's log holds (see little_dist.subruns): a workflow tool's call on
# a fleet asks whether its child was started, or ended, before this attempt.
from little_dist.event_types.engine import (
    APPROVAL_DECIDED,
    APPROVAL_REQUESTED,
    SUB_RUN_ENDED,
    SUB_RUN_STARTED,
)
from little_dist.events import Event, normalize_event_type
from little_dist.world.base import ArtifactCorruptError, World

__all__ = ["Memo", "MemoHit"]

_ToolKey = tuple[int, int, str, str]
#: (role, delegated): the scope of a session's manifest.
SessionScope = tuple[str, bool]


@dataclass(frozen=True)
class MemoHit:
    """A reusable recorded fact: ``value`` is the response (model) or the result (tool)."""

    value: Any
    event: Event


class Memo:
    """Lookups over one step path's recorded model turns and tool results."""

    def __init__(
        self,
        model_turns: dict[tuple[int, str], Event] | None = None,
        tool_results: dict[_ToolKey, Event] | None = None,
        *,
        world: World | None = None,
        sessions: dict[SessionScope, Event] | None = None,
        sub_runs: dict[str, dict[str, Any] | None] | None = None,
        approvals: dict[str, dict[str, Any] | None] | None = None,
    ) -> None:
        self._model_turns = dict(model_turns or {})
        self._tool_results = dict(tool_results or {})
        self._sessions = dict(sessions or {})
        self._world = world
        # child run id -> its little.subrun.ended payload (None: started, no end recorded)
        self._sub_runs = dict(sub_runs or {})
        # approval id -> its little.approval.decided payload (None: asked, not decided)
        self._approvals = dict(approvals or {})

    @classmethod
    def empty(cls) -> Memo:
        return cls()

    @classmethod
    def from_events(
        cls, events: Iterable[Event], step_path: str, *, world: World | None = None
    ) -> Memo:
        """The memo of ``step_path`` from a run's events (any order of attempts)."""
        prompts: dict[str, tuple[int, str]] = {}  # callId -> (turn, promptHash)
        model_turns: dict[tuple[int, str], Event] = {}
        tool_results: dict[_ToolKey, Event] = {}
        sessions: dict[SessionScope, Event] = {}
        sub_runs: dict[str, dict[str, Any] | None] = {}
        approvals: dict[str, dict[str, Any] | None] = {}
        for event in sorted(events, key=lambda item: item.sequence):
            payload = event.payload
            if payload.get("stepPath") != step_path:
                continue
            kind = normalize_event_type(event.type)
            if kind == "harness.session.started":
                role = payload.get("role")
                if isinstance(role, str) and isinstance(payload.get("manifest"), dict):
                    sessions.setdefault((role, _delegated(event)), event)
            elif kind == "harness.model.called":
                call_id, turn, digest = (
                    payload.get("callId"),
                    payload.get("turn"),
                    payload.get("promptHash"),
                )
                if isinstance(call_id, str) and isinstance(turn, int) and isinstance(digest, str):
                    prompts[call_id] = (turn, digest)
            elif kind == "harness.model.responded":
                key = prompts.get(payload.get("callId"))  # type: ignore[arg-type]
                if key is not None:
                    model_turns[key] = event
            elif kind == "harness.tool_call.succeeded":
                tool_key = _tool_key(payload)
                if tool_key is not None:
                    tool_results[tool_key] = event
            elif kind in (SUB_RUN_STARTED, SUB_RUN_ENDED):
                child = payload.get("childRunId")
                if isinstance(child, str):
                    ended = payload if kind == SUB_RUN_ENDED else None
                    sub_runs[child] = sub_runs.get(child) or ended
            elif kind in (APPROVAL_REQUESTED, APPROVAL_DECIDED):
                approval = payload.get("approvalId")
                if isinstance(approval, str):
                    decided = payload if kind == APPROVAL_DECIDED else None
                    approvals[approval] = approvals.get(approval) or decided
        return cls(
            model_turns,
            tool_results,
            world=world,
            sessions=sessions,
            sub_runs=sub_runs,
            approvals=approvals,
        )

    def __len__(self) -> int:
        return len(self._model_turns) + len(self._tool_results)

    def recorded_manifest(
        self, role: str, *, delegated: bool = False
    ) -> tuple[dict[str, Any], str | None] | None:
        """The manifest (and its recorded ``manifestHash``) of the step's first session of
        this scope, if one was recorded."""
        event = self._sessions.get((role, delegated))
        if event is None:
            return None
        recorded_hash = event.payload.get("manifestHash")
        return (
            dict(event.payload["manifest"]),
            recorded_hash if isinstance(recorded_hash, str) else None,
        )

    def sub_run_started(self, child_run_id: str) -> bool:
        """Whether the step's log names sub-run ``child_run_id`` (started or ended)."""
        return child_run_id in self._sub_runs

    def sub_run_end(self, child_run_id: str) -> dict[str, Any] | None:
        """The ``little.subrun.ended`` payload of sub-run ``child_run_id``, if recorded."""
        return self._sub_runs.get(child_run_id)

    def approval_requested(self, approval_id: str) -> bool:
        """Whether a call of the step asked for this approval before."""
        return approval_id in self._approvals

    def approval_decision(self, approval_id: str) -> dict[str, Any] | None:
        """The approval's ``little.approval.decided`` payload, once recorded."""
        return self._approvals.get(approval_id)

    def model_turn(self, turn: int, prompt_hash: str) -> MemoHit | None:
        """The recorded response of turn ``turn`` for this exact request, if any."""
        event = self._model_turns.get((turn, prompt_hash))
        if event is None:
            return None
        value = self._value(event, "response")
        return None if value is None else MemoHit(value, event)

    def tool_result(
        self, turn: int | None, call_index: int, tool_name: str, args_hash: str
    ) -> MemoHit | None:
        """The recorded result of this exact tool call, if it succeeded before."""
        event = self._tool_results.get((turn or 0, call_index, tool_name, args_hash))
        if event is None:
            return None
        payload = event.payload
        if "resultRef" in payload:
            loaded = self._load(payload["resultRef"])
            return None if loaded is None else MemoHit(loaded[0], event)
        return MemoHit(payload.get("result"), event)

    def _value(self, event: Event, key: str) -> Any:
        ref = event.payload.get(f"{key}Ref")
        if isinstance(ref, str):
            loaded = self._load(ref)
            return None if loaded is None else loaded[0]
        return event.payload.get(key)

    def _load(self, ref: str) -> tuple[Any] | None:
        if self._world is None:
            return None
        try:
            return (self._world.get_artifact(ref).payload,)
        except (NotFoundError, ArtifactCorruptError, InvalidInputError):
            # Missing or corrupt: the call runs again. Storage that cannot be reached is
            # not a miss: it fails the attempt (raised), whose retry replays the result
            # once storage is back, instead of paying for the call twice.
            return None


def _delegated(event: Event) -> bool:
    """A delegated default harness's session (occurrence ``session:{path}:{n}:default``)."""
    return (event.occurrence_id or "").endswith(":default")


def _tool_key(payload: dict[str, Any]) -> _ToolKey | None:
    turn = payload.get("turn", 0)
    call_index = payload.get("callIndex")
    name = payload.get("toolName")
    args_hash = payload.get("argsHash")
    if (
        isinstance(turn, int)
        and isinstance(call_index, int)
        and isinstance(name, str)
        and isinstance(args_hash, str)
    ):
        return (turn, call_index, name, args_hash)
    return None
