"""One tool call: memo first, then the tool, recorded as ``harness.tool_call.*``.

When the workflow has permission rules (:mod:`little_dist.permissions`), every call that
is not replayed from the memo is decided first and the decision recorded as
``harness.permission.decided``; a denied call ends as ``harness.tool_call.failed`` with
causeCode ``permission_denied`` (the model sees why and may choose another way). An ``ask``
that no approver function answers waits for a person (:mod:`.approval_gate`, and
:mod:`little_dist.approvals`): on a fleet worker the attempt suspends until one decides.

Used by the model loop (``caller="model"``, with the model turn) and by ``tool.call`` steps
(``caller="code"``, as upstream's workflow harness records them: upstream's event validator
admits only ``model`` and ``code``). A failure is returned, not raised, so the model loop can
show it to the model; a ``tool.call`` step raises it (:meth:`ToolOutcome.raise_for_error`).

A tool with ``records_lazily = True`` makes its own side effects durable (a workflow tool
records its sub-run before starting it, and its result is cheap to take again from the
sub-run's recorded end) or has none (a tool defined with ``read_only=True``, made again
after a crash mid-call): its call's ``started`` and ``succeeded`` events go with the
attempt's next write instead of one round trip each.

A tool that needs to know where it is called from (a workflow tool starts a sub-run whose id
is derived from the call, see :mod:`little_dist.subruns`) has a ``call_in_context(arguments,
call)`` method; it is called instead of ``call(arguments)`` with a :class:`ToolCallInfo`. Such
a tool may also have ``replayed_in_context(value, ctx)``: a memo hit calls it with the
recorded result, so what the call had left in the attempt (a file) is there again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from little_dist.errors import InvalidInputError, LittleError
from little_dist.harness.errors import HarnessCancelled, ToolCallError, reraise_guard_error
from little_dist.harness.log_values import digest_and_size, json_safe
from little_dist.redaction import redact
from little_dist.sandbox.supervise import STOP
from little_dist.tools import InvalidToolInputError

if TYPE_CHECKING:
    from little_dist.harness.types import HarnessContext

__all__ = [
    "CAUSE_DENIED",
    "PERMISSION_DECIDED",
    "RecordedResult",
    "ToolCallInfo",
    "ToolOutcome",
    "run_tool_call",
]

#: The event of a permission decision, and the causeCode of a call it denied.
PERMISSION_DECIDED = "harness.permission.decided"
CAUSE_DENIED = "permission_denied"


@dataclass(frozen=True)
class ToolCallInfo:
    """Where one tool call happens, for a tool with ``call_in_context``: the harness
    context (run, recorder and so the world), the call's occurrence id (``tool:{p}:{n}:{k}``,
    ``call_id``) and its memo key (``turn``, ``call_index``, ``tool_name``, ``args_hash``),
    which, unlike ``call_id``, is the same in every attempt that makes the same call.
    ``caller``: who made it (``model``, or ``code``: a ``tool.call`` step, a ``code.run``
    program); ``in_flight``: how many earlier calls of the same model turn still wait for
    their sub-runs, ``queued``: how many were held back before starting theirs (a fleet's
    workflow tools: their bounds, see :mod:`little_dist.subruns.workflow_tool`)."""

    ctx: HarnessContext
    call_id: str
    tool_name: str
    turn: int | None
    call_index: int
    args_hash: str
    caller: Literal["model", "code"] = "model"
    in_flight: int = 0
    queued: int = 0


@dataclass(frozen=True)
class RecordedResult:
    """What a tool may return instead of a plain result: ``value`` is the result (what the
    model sees, what the memo replays); ``record`` holds more fields for the call's
    ``harness.tool_call.succeeded`` event only (e.g. the bash tool's sandbox and session
    state). A tool that returns one may also have a ``replayed(payload)`` method: a memo hit
    calls it with the recorded event's payload, so the tool can take up its state."""

    value: Any
    record: Mapping[str, Any]


@dataclass(frozen=True)
class ToolOutcome:
    """A tool call's result, or its error envelope; ``memoized`` when reused from the log."""

    ok: bool
    result: Any = None
    error: Mapping[str, Any] | None = None
    memoized: bool = False
    exception: BaseException | None = None

    def content_for_model(self) -> str:
        """The ``tool`` message text the model sees."""
        if self.ok:
            if isinstance(self.result, str):
                return self.result
            return json.dumps(self.result, ensure_ascii=False, sort_keys=True)
        message = (self.error or {}).get("message", "tool failed")
        return json.dumps({"error": message}, ensure_ascii=False)

    def raise_for_error(self) -> Any:
        """The result, or the failure as a :class:`ToolCallError` (``tool.call`` steps)."""
        if self.ok:
            return self.result
        error = self.error or {}
        raise ToolCallError(
            str(error.get("message", "tool failed")),
            cause_code=str(error.get("causeCode", "tool_error")),
            retriable=bool(error.get("retriable", True)),
        ) from self.exception


def _failure(name: str, message: str, cause: str, retriable: bool) -> dict[str, Any]:
    return {"name": name, "message": message, "causeCode": cause, "retriable": retriable}


def _envelope(tool_name: str, exc: BaseException) -> dict[str, Any]:
    # The model reads this message too: a tool's error must not hand it a credential.
    text = redact(str(exc))
    message = f"tool {tool_name!r} failed: {text}" if text else f"tool {tool_name!r} failed"
    if isinstance(exc, InvalidToolInputError):
        return _failure(type(exc).__name__, text, "tool_input_error", False)
    cause = getattr(exc, "cause_code", None)
    flag = getattr(exc, "retriable", None)
    if not isinstance(flag, bool):
        flag = exc.retryable if isinstance(exc, LittleError) else True
    return _failure(
        type(exc).__name__,
        message,
        cause if isinstance(cause, str) and cause else "tool_error",
        flag,
    )


# Long on purpose: one call's record from the memo look-up to its end (replayed, cancelled,
# denied, failed or succeeded), each stage writing the ``fields`` the next one reads.
def run_tool_call(
    ctx: HarnessContext,
    *,
    tool_name: str,
    args: Any,
    caller: Literal["model", "code"],
    call_index: int,
    turn: int | None = None,
    scope: Mapping[str, Any] | None = None,
    last: bool = False,
    in_flight: int = 0,
    queued: int = 0,
) -> ToolOutcome:
    """Call ``tool_name`` from ``ctx.tools`` with ``args`` (memoized, recorded).

    ``in_flight`` / ``queued``: the turn's earlier calls still waiting for their sub-runs /
    held back before starting them (see :class:`ToolCallInfo`).

    ``last``: nothing but the attempt's commit follows the call (a ``tool.call`` step), so
    its ``harness.tool_call.succeeded`` rides with the commit instead of its own append
    (see :meth:`~little_dist.harness.recorder.EventRecorder.tool_succeeded`).
    """
    recorder = ctx.recorder
    index = recorder.next_tool_index()
    safe_args = json_safe(args)
    args_hash, args_size = digest_and_size(safe_args)  # encoded once for memo and events
    memo_turn = turn if caller == "model" else None
    tool = ctx.tools.get(tool_name)
    hit = ctx.memo.tool_result(memo_turn, call_index, tool_name, args_hash)
    if hit is not None:
        recorder.tool_memoized(index, hit.event, tool_name=tool_name, call_index=call_index)
        replayed = getattr(tool, "replayed", None)
        if callable(replayed):
            replayed(hit.event.payload)
        in_context = getattr(tool, "replayed_in_context", None)
        if callable(in_context):
            in_context(hit.value, ctx)  # e.g. files the call had written for the model
        return ToolOutcome(True, hit.value, memoized=True)
    if ctx.cancelled():
        raise HarnessCancelled(
            f"step {recorder.step_path} was cancelled before calling tool {tool_name!r}"
        )
    fields: dict[str, Any] = {
        "caller": caller,
        "tool_name": tool_name,
        "args": safe_args,
        "turn": memo_turn,
        "call_index": call_index,
        "scope": dict(scope or {}),
        "args_hash": args_hash,
        "args_size": args_size,
    }
    # A tool whose call is safe to make again (a read-only tool) or cheap to take again (a
    # workflow tool's: its sub-run's recorded end) records its call with the attempt's next
    # write instead of a round trip of its own.
    lazy = getattr(tool, "records_lazily", False) is True
    recorder.tool_started(index, durable=not lazy, **fields)
    started = time.monotonic()
    denied = _permission_gate(ctx, index, fields) if ctx.permissions else None
    if denied is not None:
        recorder.tool_failed(index, denied, duration_ms=_elapsed_ms(started), **fields)
        return ToolOutcome(False, error=denied)
    record: Mapping[str, Any] | None = None
    try:
        if tool is None:
            offered = ", ".join(sorted(ctx.tools)) or "none"
            raise InvalidInputError(
                f"tool {tool_name!r} is not available to step {recorder.step_path} "
                f"(tools offered: {offered})"
            )
        if not isinstance(safe_args, Mapping):
            raise InvalidToolInputError(
                tool_name, [("$", f"arguments must be a JSON object, got {safe_args!r}")]
            )
        in_context = getattr(tool, "call_in_context", None)
        if callable(in_context):
            info = ToolCallInfo(
                ctx,
                recorder.occurrence("tool", index),
                tool_name,
                memo_turn,
                call_index,
                args_hash,
                caller,
                in_flight,
                queued,
            )
            returned = in_context(safe_args, info)
        else:
            # A sandboxed command it runs (the bash tool) is killed when the attempt is told
            # to stop; a plain function runs to its end (Python cannot stop a thread).
            watched = STOP.set(ctx.cancelled) if ctx.can_cancel else None
            try:
                returned = tool.call(safe_args)
            finally:
                if watched is not None:
                    STOP.reset(watched)
        if isinstance(returned, RecordedResult):
            returned, record = returned.value, json_safe(dict(returned.record))
        result = json_safe(returned)
    except Exception as exc:
        reraise_guard_error(exc)
        error = _envelope(tool_name, exc)
        if tool is None:
            error["causeCode"], error["retriable"] = "runtime_config_error", False
        recorder.tool_failed(index, error, duration_ms=_elapsed_ms(started), **fields)
        if getattr(exc, "fails_attempt", False) is True:
            raise  # not for the model to work around (e.g. the sandbox cannot run here)
        return ToolOutcome(False, error=error, exception=exc)
    recorder.tool_succeeded(
        index,
        result,
        duration_ms=_elapsed_ms(started),
        durable=not (last or lazy),
        extra=record,
        **fields,
    )
    return ToolOutcome(True, result)


def _permission_gate(
    ctx: HarnessContext, index: int, fields: Mapping[str, Any]
) -> dict[str, Any] | None:
    """Decide the call against the workflow's permission rules (asking the approver for an
    ``ask``) and record ``harness.permission.decided``; the error envelope of a denial, or
    ``None`` to go on. A denial is the model's to react to, never retried as is."""
    from little_dist.permissions import decide_tool_call

    assert ctx.permissions is not None
    recorder, tool_name = ctx.recorder, fields["tool_name"]
    decision = decide_tool_call(ctx.permissions, tool_name, fields["args"])
    call_id = recorder.occurrence("tool", index)
    if decision.reason == "no_approver" and decision.rule is not None:
        from little_dist.harness.approval_gate import ask_a_person

        decision = ask_a_person(ctx, call_id, fields, decision.rule)
    payload: dict[str, Any] = {
        "callId": call_id,
        "toolName": tool_name,
        "caller": fields["caller"],
        "action": decision.action,
        "decision": decision.decision,
        "reason": decision.reason,
        "argsHash": fields["args_hash"],
        "callIndex": fields["call_index"],
        "stepPath": recorder.step_path,
        "attempt": recorder.attempt,
    }
    if fields["caller"] == "model":
        payload["turn"] = fields["turn"]
    if decision.rule is not None:
        payload["rule"] = decision.rule.to_json()
    if decision.approval_id is not None:
        payload["approvalId"] = decision.approval_id
    recorder.append(
        PERMISSION_DECIDED, payload, recorder.occurrence("permission", index), durable=True
    )
    if decision.allowed:
        return None
    return _failure("ToolPermissionDeniedError", decision.message(tool_name), CAUSE_DENIED, False)


def _elapsed_ms(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 3)
