"""The event recorder: every harness fact of one step attempt, fenced, with stable ids.

One :class:`EventRecorder` belongs to one attempt (``run_id``, ``step_path``, ``attempt``)
and appends, through ``world.append(..., fence=fence)``, so a superseded attempt (its lease
taken over) cannot write (:class:`~little_dist.errors.LeaseLostError`).

Write-through or deferred. By default every event is appended when it is recorded. A
recorder made with ``deferred=True`` (what :func:`~little_dist.runtime.execute_step_attempt`
uses) keeps events in memory and appends them in batches, one transaction per batch, under
two rules that keep it exactly as safe as writing through:

* **write-ahead before a side effect**: ``harness.model.called`` and
  ``harness.tool_call.started`` are appended, with everything pending before them, before
  the provider or the tool is called. So the attempt's ``StepAttemptStarted`` is in the log
  while any side effect of it runs: a worker that dies mid-call leaves a *running* attempt
  that the sweeper fails with ``lease_expired`` (bounded crash retries), the fleet sees the
  attempt started and does not resend it, and the in-doubt call is visible;
* **a result is durable before the attempt goes on**: ``harness.tool_call.succeeded`` and
  ``harness.model.responded`` are appended as soon as they are recorded, so whatever
  happens next (the next call, writing an output artifact, the commit failing, the process
  dying) a retry finds the result in the memo and does not repeat the side effect or pay
  for the turn again. One exception: a ``tool.call`` step's tool, whose result *is* the
  step's output and which only the commit follows, records its result with the commit (one
  fenced batch, one round trip less per step), as a Temporal activity's result and its
  completion are one record: a worker that dies between the tool's return and the commit
  leaves the call in doubt, and the retry calls the tool again, exactly as when it dies
  during the call.

Everything else (session and execute_step events, a call's ``failed`` — a failed call is
run again on retry anyway —, memoized reuse, repair rounds) stays pending until the next
append: a write-ahead point, a result, or the attempt's commit, which appends the pending
events and ``StepCompleted``/``StepFailed`` in one fenced batch
(:meth:`EventRecorder.take_pending`). A crash can therefore lose only facts with no effect
outside the process, which the retry records again; the log keeps the order in which
everything happened.

Deferred recording methods return ``None`` for an event that is still pending (the
write-through recorder returns the recorded :class:`~little_dist.events.Event`). Code that
writes to the world directly for this attempt must :meth:`~EventRecorder.flush` first, or
its events would be ordered before pending ones.

Occurrence ids (the team contract; ``{p}`` = step path, ``{n}`` = attempt)::

    harness.session.started                  session:{p}:{n}   (``session:{p}:{n}:default``
                                                                 for the default harness after
                                                                 a custom one delegated)
    harness.session.completed|failed         session-end:{p}:{n}
    harness.model.called                     model:{p}:{n}:{turn}
    harness.model.responded|failed           model-end:{p}:{n}:{turn}
    little.harness.model.memoized            model-end:{p}:{n}:{turn}
    harness.tool_call.started                tool:{p}:{n}:{k}
    harness.tool_call.succeeded|failed       tool-end:{p}:{n}:{k}
    little.harness.tool_call.memoized        tool-end:{p}:{n}:{k}
    harness.execute_step.started|succeeded   exec:{p}:{n} / exec-end:{p}:{n}   (after the r-th
                                             self-repair: exec:{p}:{n}:r{r} / exec-end:...:r{r})
    StepRepairAttempted                      repair:{p}:{n}:{r}
    harness.runtime.command.started          command:{p}:{n}:{c}
    harness.runtime.command.succeeded|failed command-end:{p}:{n}:{c}
    harness.runtime.error                    command-end:{p}:{n}:{c}   (the sandbox refused)

``turn`` and ``k`` count model turns and tool calls across the whole attempt (self-repair
re-runs continue the count), 1-based; ``c`` counts the attempt's bash commands, replayed ones
included (:mod:`little_dist.harness.bash_tool`). ``id_prefix`` (default empty) is prepended
to every id, for a caller that runs two sessions under one attempt number (e.g.
``"fix-"``). Replaying the same attempt in process appends nothing new: each id is already
recorded.

Payloads follow upstream's ``harness/event-recorder.ts`` and every harness payload also
carries ``stepPath`` and ``attempt``. ``callId`` is the event's occurrence id of the call's
start (``model:...`` / ``tool:...``). ``harness.model.responded`` carries ``model:
{provider, modelId}`` and ``response.usage`` (``inputTokens``, ``outputTokens``,
``cachedInputTokens``, ``reasoningTokens``), which the run-state fold prices.

Large payloads. A field whose canonical JSON exceeds ``inline_limit`` bytes (64 KiB) is
stored with ``world.put_artifact`` and the event carries a ref instead:

* ``harness.model.called``: ``requestRef`` (the full request); ``request`` keeps ``model``
  and ``tools`` with ``messages: []``; ``promptHash`` is still the full request's digest.
* ``harness.model.responded``: ``responseRef`` (the full response); ``response`` keeps only
  ``usage`` so pricing still works.
* ``harness.tool_call.*``: ``argsRef`` (``args: null``) and ``resultRef`` (``result: null``).
  Tool events always carry ``argsHash`` (digest of the arguments), the memo's key.
* ``harness.execute_step.succeeded`` and ``harness.session.completed``: ``outputRef``
  (``output`` omitted).

Memoized reuse (see :mod:`little_dist.harness.memo`) is recorded as the engine events
``little.harness.model.memoized`` / ``little.harness.tool_call.memoized`` with ``memoized:
true`` and ``memoizedFrom`` (the reused event's id). They carry no usage, and the fold ignores
engine events, so a reused turn is never priced twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from little_dist import occurrences
from little_dist.canonical import canonical_json, sha256_digest
from little_dist.errors import InvalidInputError, StorageUnavailableError
from little_dist.event_types.engine import BUDGET_RESERVED_EVENT_TYPE, MODEL_MEMOIZED, TOOL_MEMOIZED
from little_dist.events import Event, EventInput
from little_dist.harness.log_values import digest_and_size, json_safe
from little_dist.observability.hooks import tool_call_ended
from little_dist.world.base import ArtifactInput, Fence, World

__all__ = [
    "DEFAULT_INLINE_LIMIT",
    "MODEL_MEMOIZED",
    "TOOL_MEMOIZED",
    "EventRecorder",
    "RecordedSink",
]

DEFAULT_INLINE_LIMIT: Final = 64 * 1024

_USAGE_FIELDS = ("inputTokens", "outputTokens", "cachedInputTokens", "reasoningTokens")

#: Called with every batch of events a recorder appended (in log order).
RecordedSink = Callable[[Sequence[Event]], None]

#: A value over the inline limit is still recorded inline, up to this many bytes, when the
#: artifact store cannot be reached (see :meth:`EventRecorder.offload`).
OUTAGE_INLINE_LIMIT: Final = 1024 * 1024

_log = logging.getLogger("little.runtime")


class EventRecorder:
    """Appends one attempt's harness events (see the module docstring for ids, shapes and
    the ``deferred`` mode). ``sink``, when given, is called with every batch this recorder
    appended."""

    def __init__(
        self,
        world: World,
        run_id: str,
        step_path: str,
        attempt: int,
        fence: Fence | None = None,
        *,
        inline_limit: int = DEFAULT_INLINE_LIMIT,
        id_prefix: str = "",
        deferred: bool = False,
        sink: RecordedSink | None = None,
        signal: bool = True,
    ) -> None:
        if not isinstance(attempt, int) or attempt < 1:
            raise InvalidInputError(f"attempt must be a positive int, got {attempt!r}")
        if not step_path:
            raise InvalidInputError("step_path must be a non-empty string")
        self.world = world
        self.run_id = run_id
        self.step_path = step_path
        self.attempt = attempt
        self.fence = fence
        self.inline_limit = inline_limit
        self.id_prefix = id_prefix
        self.deferred = deferred
        #: Whether this recorder's appends may wake the scheduler (``World.append_batch``'s
        #: ``signal``): off when the writer advances the run itself.
        self.signal = signal
        self._sink = sink
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()  # keeps batches in the order they were taken
        self._pending: list[EventInput] = []
        self._turn = 0
        self._tool_index = 0
        self._repair = 0
        self._usage: dict[str, int | float] = {"inputTokens": 0, "outputTokens": 0}

    # -- ids and counters ------------------------------------------------------------------
    def occurrence(self, kind: str, *parts: object) -> str:
        """``{id_prefix}{kind}:{step_path}:{attempt}[:{part}...]``."""
        return occurrences.harness_event(
            kind, self.step_path, self.attempt, *parts, prefix=self.id_prefix
        )

    def next_turn(self) -> int:
        with self._lock:
            self._turn += 1
            return self._turn

    def next_tool_index(self) -> int:
        with self._lock:
            self._tool_index += 1
            return self._tool_index

    @property
    def usage(self) -> dict[str, int | float]:
        """Tokens of the model calls this recorder recorded as answered (memoized excluded)."""
        with self._lock:
            return dict(self._usage)

    # -- low level -------------------------------------------------------------------------
    def append(
        self,
        event_type: str,
        payload: dict[str, Any],
        occurrence_id: str,
        *,
        durable: bool = False,
    ) -> Event | None:
        """Record one event, fenced, idempotent by ``occurrence_id``.

        Write-through: appended now. Deferred: kept pending, unless ``durable`` (a
        write-ahead point), which appends everything pending with it; ``None`` while pending.
        """
        event = EventInput(type=event_type, payload=payload, occurrence_id=occurrence_id)
        if not self.deferred:
            with self._write_lock:
                if self.signal:
                    recorded = self.world.append(self.run_id, event, fence=self.fence)
                else:
                    (recorded,) = self.world.append_batch(
                        self.run_id, [event], fence=self.fence, signal=False
                    )
            if self._sink is not None:
                self._sink((recorded,))
            return recorded
        with self._lock:
            self._pending.append(event)
        if not durable:
            return None
        flushed = self.flush()
        return flushed[-1] if flushed else None

    def flush(self) -> list[Event]:
        """Append every pending event now, in one fenced batch; the recorded events."""
        with self._write_lock:
            pending = self.take_pending()
            if not pending:
                return []
            recorded = self.world.append_batch(
                self.run_id, pending, fence=self.fence, signal=self.signal
            )
        if self._sink is not None:
            self._sink(recorded)
        return recorded

    def end_now(self, ending: Sequence[EventInput], fence: Fence) -> list[Event]:
        """Append what is pending and ``ending`` in one batch fenced with ``fence`` (the
        attempt's lease as last renewed), releasing the lease: how the step timeout's
        watchdog ends an attempt whose thread does not return. Waits for an append in
        progress, so the attempt's batches stay in order."""
        with self._write_lock:
            batch = [*self.take_pending(), *ending]
            recorded = self.world.append_batch(
                self.run_id, batch, fence=fence, signal=True, release=True
            )
        if self._sink is not None:
            self._sink(recorded)
        return recorded

    def take_pending(self) -> list[EventInput]:
        """Hand over the pending events (the caller appends them, e.g. with its commit)."""
        with self._lock:
            pending, self._pending = self._pending, []
        return pending

    @property
    def pending_count(self) -> int:
        """How many events are recorded and not yet appended."""
        with self._lock:
            return len(self._pending)

    def _base(self) -> dict[str, Any]:
        return {"stepPath": self.step_path, "attempt": self.attempt}

    def offload(self, value: Any, name: str, *, size: int | None = None) -> str | None:
        """Store ``value`` as an artifact when its canonical JSON is over the limit.

        Returns the ``artifact://`` ref, or ``None`` when the value stays inline. ``size``
        is the canonical JSON's UTF-8 size when the caller already has it.
        """
        if size is None:
            size = len(canonical_json(value).encode("utf-8"))
        if size <= self.inline_limit:
            return None
        try:
            manifest = self.world.put_artifact(
                ArtifactInput(
                    run_id=self.run_id,
                    name=name,
                    payload=value,
                    content_type="application/json",
                    step_path=self.step_path,
                )
            )
        except StorageUnavailableError:
            if size > OUTAGE_INLINE_LIMIT:
                raise
            # The artifact store is down: a result kept in the event is a result the retry
            # replays, where a result lost with its artifact is a call paid for twice.
            _log.warning(
                "%s of %s in run %s (%d bytes) recorded inline: the artifact store is unreachable",
                name,
                self.step_path,
                self.run_id,
                size,
            )
            return None
        return manifest.artifact_ref

    def _field(
        self, payload: dict[str, Any], key: str, value: Any, name: str, size: int | None = None
    ) -> None:
        ref = self.offload(value, name, size=size)
        if ref is None:
            payload[key] = value
        else:
            payload[key] = None
            payload[f"{key}Ref"] = ref

    # -- sessions --------------------------------------------------------------------------
    def session_started(
        self,
        *,
        role: str,
        task_kind: str,
        manifest: Mapping[str, Any],
        delegated: bool = False,
        parent_run_id: str | None = None,
    ) -> Event | None:
        manifest_json = json_safe(dict(manifest))
        payload: dict[str, Any] = {
            "runId": self.run_id,
            "role": role,
            "task": {"kind": task_kind},
            "manifest": manifest_json,
            "manifestHash": sha256_digest(manifest_json),
            **self._base(),
        }
        if parent_run_id is not None:
            payload["parentRunId"] = parent_run_id
        occurrence = (
            self.occurrence("session", "default") if delegated else self.occurrence("session")
        )
        return self.append("harness.session.started", payload, occurrence)

    def session_completed(self, result: Mapping[str, Any]) -> Event | None:
        payload: dict[str, Any] = {"runId": self.run_id, "usage": self.usage, **self._base()}
        output = {"result": json_safe(dict(result))}
        ref = self.offload(output, "harness.session.output")
        if ref is None:
            payload["output"] = output
        else:
            payload["outputRef"] = ref
        return self.append("harness.session.completed", payload, self.occurrence("session-end"))

    def session_failed(self, error: Mapping[str, Any]) -> Event | None:
        payload = {"runId": self.run_id, "error": dict(error), **self._base()}
        return self.append("harness.session.failed", payload, self.occurrence("session-end"))

    # -- model calls -----------------------------------------------------------------------
    def model_called(
        self,
        turn: int,
        request: Mapping[str, Any],
        *,
        reserved_usd: float | None = None,
        expected_sequence: int | None = None,
    ) -> Event | None:
        """Write-ahead: durable (with everything pending) before the provider is called.

        ``reserved_usd`` with ``expected_sequence``: the call's worst-case cost held against
        the run's budget (``little.budget.reserved``, appended with the call), both (and
        whatever is pending) landing only on that log, else
        :class:`~little_dist.world.base.SequenceConflictError`, nothing lost (see
        :mod:`little_dist.harness.budget_hold`)."""
        full = json_safe(dict(request))
        digest, size = digest_and_size(full)
        payload: dict[str, Any] = {
            "callId": self.occurrence("model", turn),
            "turn": turn,
            "promptHash": digest,
            **self._base(),
        }
        ref = self.offload(full, "harness.model.request", size=size)
        if ref is None:
            payload["request"] = full
        else:
            payload["request"] = {
                "model": full.get("model"),
                "messages": [],
                "tools": full.get("tools", []),
            }
            payload["requestRef"] = ref
        if reserved_usd is not None and expected_sequence is not None:
            call_id = self.occurrence("model", turn)
            hold = EventInput(
                type=BUDGET_RESERVED_EVENT_TYPE,
                payload={
                    "callId": call_id,
                    "reservedUsd": reserved_usd,
                    **self._base(),
                },
                occurrence_id=f"budget-hold:{call_id}",
            )
            called = EventInput(type="harness.model.called", payload=payload, occurrence_id=call_id)
            return self._append_expecting((hold, called), expected_sequence)
        return self.append(
            "harness.model.called", payload, self.occurrence("model", turn), durable=True
        )

    def _append_expecting(self, events: Sequence[EventInput], expected_sequence: int) -> Event:
        """Append what is pending and ``events`` if the log's last sequence is
        ``expected_sequence``; on a conflict the pending events stay pending."""
        with self._write_lock:
            pending = self.take_pending()
            try:
                recorded = self.world.append_batch(
                    self.run_id,
                    [*pending, *events],
                    expected_sequence=expected_sequence,
                    fence=self.fence,
                    signal=self.signal,
                )
            except BaseException:
                with self._lock:
                    self._pending[:0] = pending
                raise
        if self._sink is not None:
            self._sink(recorded)
        return recorded[-1]

    def model_responded(
        self,
        turn: int,
        response: Mapping[str, Any],
        *,
        model: Mapping[str, str],
        duration_ms: float,
    ) -> Event | None:
        full = json_safe(dict(response))
        usage = full.get("usage") or {"inputTokens": 0, "outputTokens": 0}
        payload: dict[str, Any] = {
            "callId": self.occurrence("model", turn),
            "turn": turn,
            "model": dict(model),
            "durationMs": duration_ms,
            **self._base(),
        }
        ref = self.offload(full, "harness.model.response")
        if ref is None:
            payload["response"] = full
        else:
            payload["response"] = {"usage": usage}
            payload["responseRef"] = ref
        with self._lock:
            for key in _USAGE_FIELDS:
                value = usage.get(key)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    self._usage[key] = self._usage.get(key, 0) + value
        return self.append(
            "harness.model.responded", payload, self.occurrence("model-end", turn), durable=True
        )

    def model_failed(
        self, turn: int, error: Mapping[str, Any], *, duration_ms: float
    ) -> Event | None:
        payload = {
            "callId": self.occurrence("model", turn),
            "turn": turn,
            "error": dict(error),
            "durationMs": duration_ms,
            "willRetry": False,
            **self._base(),
        }
        return self.append("harness.model.failed", payload, self.occurrence("model-end", turn))

    def model_memoized(self, turn: int, source: Event) -> Event | None:
        payload = {
            "turn": turn,
            "memoized": True,
            "memoizedFrom": source.event_id,
            "sourceOccurrenceId": source.occurrence_id,
            **self._base(),
        }
        return self.append(MODEL_MEMOIZED, payload, self.occurrence("model-end", turn))

    # -- tool calls ------------------------------------------------------------------------
    def _tool_fields(
        self,
        index: int,
        *,
        caller: str,
        tool_name: str,
        args: Any,
        turn: int | None,
        call_index: int,
        scope: Mapping[str, Any],
        args_hash: str | None = None,
        args_size: int | None = None,
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "callId": self.occurrence("tool", index),
            "caller": caller,
            "toolName": tool_name,
            "callIndex": call_index,
            "scope": dict(scope),
            **self._base(),
        }
        if caller == "model":
            payload["turn"] = turn
        safe_args = json_safe(args)
        if args_hash is None or args_size is None:
            args_hash, args_size = digest_and_size(safe_args)
        payload["argsHash"] = args_hash
        self._field(payload, "args", safe_args, "harness.tool_call.args", args_size)
        return payload

    def tool_started(self, index: int, *, durable: bool = True, **fields: Any) -> Event | None:
        """Write-ahead: durable (with everything pending) before the tool is called.

        ``args_hash`` / ``args_size`` (digest and canonical size of the JSON-safe args) may
        be passed when the caller computed them, here and to the call's ending.
        ``durable=False``: pending, for a tool that makes its own side effect durable first
        (a workflow tool records its sub-run before starting it).
        """
        payload = self._tool_fields(index, **fields)
        return self.append(
            "harness.tool_call.started", payload, self.occurrence("tool", index), durable=durable
        )

    def tool_succeeded(
        self,
        index: int,
        result: Any,
        *,
        duration_ms: float,
        durable: bool = True,
        extra: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> Event | None:
        """Durable when recorded (with everything pending): the memo's source on retry.

        ``extra``: fields the tool records beside its result (see
        :class:`~little_dist.harness.tool_calls.RecordedResult`).

        ``durable=False``: pending, for a call whose result is the step's output and that
        only the commit follows (a ``tool.call`` step): the result and ``StepCompleted``
        are then appended in one fenced batch, as an activity's result and its completion
        are one record.
        """
        payload = self._tool_fields(index, **fields)
        payload["durationMs"] = duration_ms
        self._field(payload, "result", json_safe(result), "harness.tool_call.result")
        for key, value in (extra or {}).items():
            # A tool's own fields (RecordedResult.record) never replace the call's.
            payload.setdefault(key, value)
        self._observe_tool(payload, duration_ms, None)
        return self.append(
            "harness.tool_call.succeeded",
            payload,
            self.occurrence("tool-end", index),
            durable=durable,
        )

    def tool_failed(
        self, index: int, error: Mapping[str, Any], *, duration_ms: float, **fields: Any
    ) -> Event | None:
        payload = self._tool_fields(index, **fields)
        payload["durationMs"] = duration_ms
        payload["error"] = dict(error)
        self._observe_tool(payload, duration_ms, str(error.get("causeCode") or "error"))
        return self.append("harness.tool_call.failed", payload, self.occurrence("tool-end", index))

    def _observe_tool(
        self, payload: Mapping[str, Any], duration_ms: float, error: str | None
    ) -> None:
        tool_call_ended(
            run_id=self.run_id,
            step_path=self.step_path,
            tool_name=str(payload["toolName"]),
            call_id=str(payload["callId"]),
            seconds=duration_ms / 1000,
            error=error,
        )

    def tool_memoized(
        self, index: int, source: Event, *, tool_name: str, call_index: int
    ) -> Event | None:
        payload = {
            "toolName": tool_name,
            "callIndex": call_index,
            "memoized": True,
            "memoizedFrom": source.event_id,
            "sourceOccurrenceId": source.occurrence_id,
            **self._base(),
        }
        return self.append(TOOL_MEMOIZED, payload, self.occurrence("tool-end", index))

    # -- runtime commands ------------------------------------------------------------------
    def trace(self, event_type: str, payload: Mapping[str, Any], kind: str, *parts: object) -> None:
        """Record one of upstream's runtime events (``harness.runtime.command.*``, ...) of
        this attempt, pending until the next write (they have no effect outside the
        process: a crash loses them with the call they describe, which the retry runs)."""
        self.append(
            event_type, {**json_safe(dict(payload)), **self._base()}, self.occurrence(kind, *parts)
        )

    # -- execute_step and repair -----------------------------------------------------------
    def execute_step_started(
        self, step: Mapping[str, Any], *, visit_index: int, step_input: Any
    ) -> Event | None:
        payload = {
            "runId": self.run_id,
            "stepId": step.get("id"),
            "uses": step.get("uses"),
            "visitIndex": visit_index,
            "inputHash": sha256_digest(json_safe(step_input)),
            **self._base(),
        }
        return self.append("harness.execute_step.started", payload, self._exec_id("exec"))

    def execute_step_succeeded(
        self, step: Mapping[str, Any], *, visit_index: int, output: Any, duration_ms: float
    ) -> Event | None:
        safe = json_safe(output)
        digest, size = digest_and_size(safe)
        payload: dict[str, Any] = {
            "runId": self.run_id,
            "stepId": step.get("id"),
            "uses": step.get("uses"),
            "visitIndex": visit_index,
            "outputHash": digest,
            "durationMs": duration_ms,
            **self._base(),
        }
        ref = self.offload(safe, "harness.execute_step.output", size=size)
        if ref is None:
            payload["output"] = safe
        else:
            payload["outputRef"] = ref
        return self.append("harness.execute_step.succeeded", payload, self._exec_id("exec-end"))

    def _exec_id(self, kind: str) -> str:
        with self._lock:
            round_ = self._repair
        return self.occurrence(kind, f"r{round_}") if round_ else self.occurrence(kind)

    def repair_attempted(self, step_id: str, findings: list[str]) -> Event | None:
        """``StepRepairAttempted`` (upstream: ``stepPath``, ``attempt``, ``findings``)."""
        with self._lock:
            self._repair += 1
            number = self._repair
        payload = {
            "stepId": step_id,
            "findings": list(findings),
            "repairAttempt": number,
            **self._base(),
        }
        return self.append("StepRepairAttempted", payload, self.occurrence("repair", number))
