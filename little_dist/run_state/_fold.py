"""The fold: events in, :class:`RunState` out, one event at a time.

Upstream's ``materializeRunStateFromEvents`` rules, applied straight to payload dicts (no
model validation per event; handlers are found by ``type`` in a dict):

- ``RunStarted``/``WorkflowVersionRegistered`` set ``workflowVersionId``; RunStarted also
  marks the run running and sets ``startedAt``.
- ``StepScheduled`` creates the step (pending). ``StepAttemptStarted`` starts an attempt
  (``attemptId`` or ``attempt_<n>``) and clears the step's error, output and outputRef.
- ``StepCompleted``/``StepFailed`` finish the last attempt, or record a one-event
  ``attempt_1`` when there was none. ``"output" in payload`` decides whether an output is
  recorded, so ``output: null`` is an output; refs count only when they are
  ``artifact://`` strings.
- ``ModelCallCompleted`` and ``harness.model.responded`` are priced from registry rates
  (a payload's own ``costUsd`` is never read) into the run total and, with a ``stepPath``,
  the step's total (creating the step). A builder made with ``pricing_fallback=`` asks that
  fallback for models the registry lacks (ours; upstream has none).
  ``harness.session.completed`` usage is a rollup of those calls and is not counted again.
  Legacy ``Harness*`` type names are normalized.
- Sub-runs (engine extension, :mod:`._subruns`): ``RunStarted.parentRunId`` links a child
  to its parent; ``little.subrun.started`` / ``.ended`` name a parent's children and their
  ends; ``little.step.suspended`` ends the step's last attempt as ``suspended`` (the step
  stays running) waiting for the children of its ``waitingFor`` not yet ended, and each
  ``little.subrun.ended`` takes its child off every waiting step (each an O(1) change of
  the builder's :class:`~._subruns.SubRunLinks`; the view is made once per snapshot). A
  suspension with ``resumeOn: "any"`` (an orchestrator holding calls back behind its
  ``maxConcurrentSubRuns`` gate) waits only for the first of its children to end: its
  waiting set empties then (or at once, when one had ended before it was recorded).
  ``little.approval.decided`` ends what a step suspended for a person's decision waits for
  (its ``waitingFor`` names the ``approvalId``; see :mod:`little_dist.approvals`), as a
  child's end does.
- ``RunCompleted``/``RunFailed`` finish the run. ``Parallel*`` events feed the engine's
  parallel-group view (``_parallel``), which is not part of upstream's JSON. Every other
  type (engine-only events included) only counts.

Ownership: a :class:`RunStateBuilder` belongs to one caller (e.g. the scheduler's cache
entry for one run) and is not thread-safe. :meth:`RunStateBuilder.snapshot` returns an
immutable :class:`RunState`; the builder copies any step, list or group a snapshot still
holds before it changes it, so snapshots never change and folding onto an old state (with
:func:`fold_events`) never disturbs it or its other descendants.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeAlias

from little_dist.errors import EventLogCorruptError, InvalidInputError
from little_dist.event_types.engine import (
    BUDGET_DRAWN_EVENT_TYPE,
    BUDGET_EVENT_TYPE,
    BUDGET_LENT_EVENT_TYPE,
    BUDGET_RESERVED_EVENT_TYPE,
)
from little_dist.events import Event
from little_dist.pricing import PriceFallback
from little_dist.run_state._budget import EMPTY_LEDGER, BudgetLedger, ledger_touches
from little_dist.run_state._journal import StepJournal
from little_dist.run_state._parallel import ParallelGroupState, apply_parallel
from little_dist.run_state._parallel import is_artifact_ref as _is_ref
from little_dist.run_state._state import ABSENT, RunState, StepAttempt, StepState
from little_dist.run_state._subruns import (
    APPROVAL_DECIDED,
    EMPTY_SUB_RUNS,
    STEP_SUSPENDED,
    SUB_RUN_ENDED,
    SUB_RUN_STARTED,
    SubRunLinks,
    SubRunView,
)
from little_dist.run_state._usage import (
    Pricer,
    Totals,
    add_call,
    empty_totals,
    price_call,
    pricer_for,
)

__all__ = ["FOLDED_EVENT_TYPES", "EventLike", "RunStateBuilder", "RunStateEventMismatchError"]

EventLike: TypeAlias = Event | Mapping[str, Any]
"""An :class:`~little_dist.events.Event` or its JSON envelope (camelCase keys)."""


class RunStateEventMismatchError(EventLogCorruptError):
    """The log has a gap, a duplicate or out-of-order sequence, or another run's event.

    Messages are upstream's, e.g. ``Event sequence mismatch for run_x: expected 2,
    received 1.``
    """


def _js(value: object) -> str:
    # How a JS template literal prints the offending value.
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


def _envelope(event: object) -> tuple[Any, Any, Any, Any, Any]:
    """``(runId, sequence, type, payload, recordedAt)`` of an Event or a non-dict mapping."""
    if isinstance(event, Event):
        return event.run_id, event.sequence, event.type, event.payload, event.recorded_at
    if isinstance(event, Mapping):
        return (
            event.get("runId"),
            event.get("sequence"),
            event.get("type"),
            event.get("payload"),
            event.get("recordedAt"),
        )
    raise InvalidInputError(f"Not an event envelope: {type(event).__name__}")


class RunStateBuilder:
    """Mutable fold of one run's events; see the module docstring for the ownership rule."""

    __slots__ = (
        "_artifact_set",
        "_artifacts",
        "_artifacts_shared",
        "_budget_usd",
        "_error",
        "_event_count",
        "_finished_at",
        "_held",
        "_held_shared",
        "_journal",
        "_journal_len",
        "_ledger",
        "_ledger_shared",
        "_output",
        "_output_ref",
        "_owned",
        "_parallel",
        "_parallel_owned",
        "_parallel_shared",
        "_pricer",
        "_run_id",
        "_started_at",
        "_status",
        "_steps",
        "_steps_shared",
        "_sub_links",
        "_sub_runs",
        "_usage",
        "_workflow_version_id",
    )

    def __init__(self, run_id: str, *, pricing_fallback: PriceFallback | None = None) -> None:
        """Start an empty fold of ``run_id``.

        ``pricing_fallback`` prices model calls the registry has no rates for (e.g.
        :func:`little_dist.litellm_prices.litellm_price_fallback`); ``None`` means registry
        rates only, as upstream (the default).
        """
        if not isinstance(run_id, str) or not run_id:
            raise InvalidInputError(f"A run state needs a run id, got {run_id!r}")
        self._run_id = run_id
        self._pricer: Pricer = pricer_for(pricing_fallback)
        self._status = "pending"
        self._workflow_version_id: str | None = None
        self._started_at: str | None = None
        self._finished_at: str | None = None
        self._output: Any = ABSENT
        self._output_ref: str | None = None
        self._usage: Totals = empty_totals()
        self._steps: dict[str, StepState] = {}
        self._steps_shared = False
        self._owned: set[str] = set()
        self._artifacts: list[str] = []
        self._artifact_set: set[str] = set()
        self._artifacts_shared = False
        self._error: Any = ABSENT
        self._event_count = 0
        self._parallel: dict[str, ParallelGroupState] = {}
        self._parallel_shared = False
        self._parallel_owned: set[str] = set()
        self._sub_runs: SubRunView = EMPTY_SUB_RUNS
        # While it folds sub-run events: their mutable form (the truth once made; _sub_runs
        # and the steps' waiting sets are brought up to date by snapshot).
        self._sub_links: SubRunLinks | None = None
        # The step paths whose status changed, shared with the snapshots (see ._journal).
        self._journal = StepJournal()
        self._journal_len = 0
        self._budget_usd: float | None = None
        # callId -> USD reserved by a budgeted model call not yet ended (copy-on-write).
        self._held: dict[str, float] = {}
        self._held_shared = False
        self._ledger = EMPTY_LEDGER  # (its share of a budget tree: ._budget)
        self._ledger_shared = True

    @classmethod
    def from_state(cls, state: RunState) -> RunStateBuilder:
        """A builder that continues ``state``; ``state`` itself is never changed.

        The builder prices with the same source ``state`` was folded with.
        """
        builder = cls(state._run_id, pricing_fallback=None)
        builder._pricer = state._pricer
        builder._status = state._status
        builder._workflow_version_id = state._workflow_version_id
        builder._started_at = state._started_at
        builder._finished_at = state._finished_at
        builder._output = state._output
        builder._output_ref = state._output_ref
        builder._usage = state._usage.copy()
        builder._steps = state._steps
        builder._steps_shared = True
        builder._artifacts = state._artifacts
        builder._artifact_set = set(state._artifacts)
        builder._artifacts_shared = True
        builder._error = state._error
        builder._event_count = state._event_count
        builder._parallel = state._parallel
        builder._parallel_shared = True
        builder._sub_runs = state._sub_runs
        builder._journal = state._journal
        builder._journal_len = state._journal_len
        builder._budget_usd = state._budget_usd
        builder._held = state._held
        builder._held_shared = True
        builder._ledger = state._ledger
        builder._ledger_shared = True
        return builder

    @property
    def run_id(self) -> str:
        return self._run_id

    @property
    def event_count(self) -> int:
        """Events folded so far, which is the last sequence; the next must be this + 1."""
        return self._event_count

    def snapshot(self) -> RunState:
        """The state so far, as an immutable :class:`RunState` (O(1) plus usage copy, plus
        the sub-run view once after sub-run events changed it)."""
        links = self._sub_links
        if links is not None:
            # (first: a step changed here is one the snapshot then holds)
            for path in links.changed_steps:
                self._step(path)._waiting = frozenset(links.waiting.get(path, ()))
            links.changed_steps.clear()
            self._sub_runs = links.view()
        state = RunState.__new__(RunState)
        state._run_id = self._run_id
        state._status = self._status  # type: ignore[assignment]
        state._workflow_version_id = self._workflow_version_id
        state._started_at = self._started_at
        state._finished_at = self._finished_at
        state._output = self._output
        state._output_ref = self._output_ref
        state._usage = self._usage.copy()
        state._steps = self._steps
        state._artifacts = self._artifacts
        state._error = self._error
        state._event_count = self._event_count
        state._parallel = self._parallel
        state._pricer = self._pricer
        state._sub_runs = self._sub_runs
        state._journal = self._journal
        state._journal_len = self._journal_len
        state._budget_usd = self._budget_usd
        state._held = self._held
        self._held_shared = True
        state._ledger = self._ledger
        self._ledger_shared = True
        # From now on the snapshot shares these: copy before the next change.
        self._steps_shared = True
        self._owned.clear()
        self._artifacts_shared = True
        self._parallel_shared = True
        self._parallel_owned.clear()
        return state

    def apply(self, event: EventLike) -> None:
        """Fold one event (the next in sequence)."""
        self.apply_all((event,))

    def apply_all(self, events: Iterable[EventLike]) -> None:
        """Fold events in order.

        Raises :class:`RunStateEventMismatchError` at the first event of another run or out
        of sequence; the events before it stay applied (they are a valid prefix).
        """
        handlers = _HANDLERS
        run_id = self._run_id
        event_run_id: Any
        sequence: Any
        event_type: Any
        payload: Any
        recorded_at: Any
        for event in events:
            if event.__class__ is dict:
                envelope: dict[str, Any] = event
                event_run_id = envelope.get("runId")
                sequence = envelope.get("sequence")
                event_type = envelope.get("type")
                payload = envelope.get("payload")
                recorded_at = envelope.get("recordedAt")
            else:
                event_run_id, sequence, event_type, payload, recorded_at = _envelope(event)
            index = self._event_count
            if event_run_id != run_id:
                raise RunStateEventMismatchError(
                    f"Event runId mismatch at index {index}: expected {run_id}, "
                    f"received {_js(event_run_id)}."
                )
            if sequence != index + 1 or sequence.__class__ is bool:
                raise RunStateEventMismatchError(
                    f"Event sequence mismatch for {run_id}: expected {index + 1}, "
                    f"received {_js(sequence)}."
                )
            if payload.__class__ is not dict:
                if not isinstance(payload, Mapping):
                    raise EventLogCorruptError(
                        f"Event {sequence} of {run_id} ({event_type}) has no payload object"
                    )
                payload = dict(payload)
            self._event_count = index + 1
            handler = handlers.get(event_type)
            if handler is not None:
                handler(self, payload, recorded_at, event_type)

    # -- copy-on-write access -----------------------------------------------------------

    def _step(self, path: str) -> StepState:
        """The step at ``path``, created if new, owned by this builder (safe to change)."""
        steps = self._steps
        if self._steps_shared:
            steps = self._steps = steps.copy()
            self._steps_shared = False
        step = steps.get(path)
        if step is None:
            step = steps[path] = StepState(path)
            self._owned.add(path)
        elif path not in self._owned:
            step = steps[path] = step._copy()
            self._owned.add(path)
        return step

    def _status_changed(self, path: str) -> None:
        """Note in the journal that the step at ``path`` may have changed status."""
        self._journal, self._journal_len = self._journal.append(self._journal_len, path)

    def _links(self) -> SubRunLinks:
        """The sub-run links to change (made from the last view on the first change)."""
        links = self._sub_links
        if links is None:
            view = self._sub_runs
            waiting = {path: set(self._steps[path]._waiting) for path in view.suspended}
            links = self._sub_links = SubRunLinks(view, waiting)
        return links

    def _add_artifact(self, ref: str) -> None:
        if ref in self._artifact_set:
            return
        if self._artifacts_shared:
            self._artifacts = self._artifacts.copy()
            self._artifacts_shared = False
        self._artifacts.append(ref)
        self._artifact_set.add(ref)

    def _group(self, path: str, *, create: bool) -> ParallelGroupState | None:
        groups = self._parallel
        group = groups.get(path)
        if group is None and not create:
            return None
        if self._parallel_shared:
            groups = self._parallel = groups.copy()
            self._parallel_shared = False
        if group is None:
            group = groups[path] = ParallelGroupState(path)
            self._parallel_owned.add(path)
        elif path not in self._parallel_owned:
            group = groups[path] = group._copy()
            self._parallel_owned.add(path)
        return group

    # -- handlers (payload is a dict; recorded_at is the envelope's recordedAt) -----------

    def _on_run_started(self, payload: dict[str, Any], at: Any, event_type: str) -> None:
        version_id = payload.get("workflowVersionId")
        if version_id.__class__ is str:
            self._workflow_version_id = version_id
        if event_type == "RunStarted":
            self._status = "running"
            self._started_at = at
            parent = payload.get("parentRunId")
            if parent.__class__ is str:
                step_path = payload.get("parentStepPath")
                links = self._links()
                links.parent_run_id = parent
                links.parent_step_path = step_path if step_path.__class__ is str else None
                links.changed()
                if payload.get("budgetFromParent") is True:
                    self._own_ledger().parent = parent
            self._on_budget(payload, at, event_type)  # (a child's own smaller budget)

    def _on_step_scheduled(self, payload: dict[str, Any], at: Any, event_type: str) -> None:
        path = payload.get("stepPath")
        if path.__class__ is str and path not in self._steps:
            self._step(path)

    def _on_attempt_started(self, payload: dict[str, Any], at: Any, event_type: str) -> None:
        path = payload.get("stepPath")
        if path.__class__ is not str:
            return
        step = self._step(path)
        self._status_changed(path)
        step._status = "running"
        step._error = ABSENT
        step._output = ABSENT
        step._output_ref = None
        links = self._sub_links
        if links is not None:
            links.stop_waiting(path)
            links.changed_steps.discard(path)
            step._waiting = frozenset()
        elif step._waiting:
            step._waiting = frozenset()
            view = self._sub_runs
            self._sub_runs = dataclasses.replace(
                view,
                suspended=view.suspended - {path},
                resume_on_any=view.resume_on_any - {path},
            )
        attempt_id = payload.get("attemptId")
        if attempt_id.__class__ is not str:
            attempt_id = f"attempt_{len(step._attempts) + 1}"
        step._attempts.append(StepAttempt(attempt_id, at, None, "running"))

    def _on_budget(self, payload: dict[str, Any], at: Any, event_type: str) -> None:
        budget = payload.get("budgetUsd")
        if budget.__class__ in (int, float) and budget > 0:
            self._budget_usd = float(budget)
        lender = payload.get("fromParentRunId")
        if lender.__class__ is str:
            self._own_ledger().parent = lender

    def _on_budget_reserved(self, payload: dict[str, Any], at: Any, event_type: str) -> None:
        reserved = payload.get("reservedUsd")
        call_id = payload.get("callId")
        if reserved.__class__ in (int, float) and call_id.__class__ is str:
            self._own_held()[call_id] = float(reserved)

    def _own_ledger(self) -> BudgetLedger:
        if self._ledger_shared:
            self._ledger = self._ledger.copy()
            self._ledger_shared = False
        return self._ledger

    def _on_budget_drawn(self, payload: dict[str, Any], at: Any, event_type: str) -> None:
        self._own_ledger().on_drawn(payload)

    def _on_budget_lent(self, payload: dict[str, Any], at: Any, event_type: str) -> None:
        self._own_ledger().on_lent(payload)

    def _own_held(self) -> dict[str, float]:
        if self._held_shared:
            self._held = dict(self._held)
            self._held_shared = False
        return self._held

    def _release(self, payload: dict[str, Any]) -> float:
        """Ends a budgeted call's hold; what it held (0.0: none)."""
        call_id = payload.get("callId")
        if call_id.__class__ is str and call_id in self._held:
            return self._own_held().pop(call_id)
        return 0.0

    def _on_model_failed(self, payload: dict[str, Any], at: Any, event_type: str) -> None:
        self._release(payload)
        error = payload.get("error")
        if error.__class__ is dict and error.get("usage").__class__ is dict:
            # An interrupted call: what it is taken to have spent (little_dist.harness.
            # interruptible) counts as a call's usage.
            call = price_call(error.get("model"), error["usage"], self._pricer)
            add_call(self._usage, call)
            path = payload.get("stepPath")
            if path.__class__ is str:
                add_call(self._step(path)._usage, call)

    def _on_model_call(self, payload: dict[str, Any], at: Any, event_type: str) -> None:
        held = self._release(payload) if self._held else 0.0
        if event_type == "ModelCallCompleted":
            usage = payload.get("usage")
        else:
            response = payload.get("response")
            usage = response.get("usage") if response.__class__ is dict else None
        if usage.__class__ is not dict:
            return
        call = price_call(payload.get("model"), usage, self._pricer)
        if held and call[4] is None:  # (a budgeted call this fold cannot price)
            self._own_ledger().unpriced += held
        add_call(self._usage, call)
        path = payload.get("stepPath")
        if path.__class__ is str:
            add_call(self._step(path)._usage, call)

    def _on_artifact_created(self, payload: dict[str, Any], at: Any, event_type: str) -> None:
        ref = payload.get("artifactRef")
        if not _is_ref(ref):
            return
        self._add_artifact(ref)
        path = payload.get("stepPath")
        if path.__class__ is str:
            refs = self._step(path)._artifact_refs
            if ref not in refs:
                refs.append(ref)

    def _on_step_completed(self, payload: dict[str, Any], at: Any, event_type: str) -> None:
        path = payload.get("stepPath")
        if path.__class__ is not str:
            return
        step = self._step(path)
        self._status_changed(path)
        step._status = "completed"
        step._error = ABSENT
        attempts = step._attempts
        if attempts:
            last = attempts[-1]
            attempts[-1] = StepAttempt(
                last._attempt_id, last._started_at, at, "completed", last._error
            )
        else:
            attempts.append(StepAttempt("attempt_1", at, at, "completed", born_ended=True))
        if "output" in payload:
            step._output = payload["output"]
        refs = step._artifact_refs
        output_ref = payload.get("outputRef")
        if _is_ref(output_ref):
            step._output_ref = output_ref
            if output_ref not in refs:
                refs.append(output_ref)
            self._add_artifact(output_ref)
        more = payload.get("artifactRefs")
        if more.__class__ is list:
            for ref in more:
                if _is_ref(ref):
                    if ref not in refs:
                        refs.append(ref)
                    self._add_artifact(ref)
        metadata = payload.get("metadata")
        if metadata.__class__ is dict:
            step._metadata = metadata

    def _on_step_failed(self, payload: dict[str, Any], at: Any, event_type: str) -> None:
        path = payload.get("stepPath")
        if path.__class__ is not str:
            return
        step = self._step(path)
        self._status_changed(path)
        error = payload.get("error", ABSENT)
        step._status = "failed"
        step._error = error
        attempts = step._attempts
        if attempts:
            last = attempts[-1]
            attempts[-1] = StepAttempt(last._attempt_id, last._started_at, at, "failed", error)
        else:
            attempts.append(StepAttempt("attempt_1", at, at, "failed", error, born_ended=True))

    def _on_step_suspended(self, payload: dict[str, Any], at: Any, event_type: str) -> None:
        path = payload.get("stepPath")
        if path.__class__ is not str:
            return
        step = self._step(path)
        attempts = step._attempts
        if not attempts or attempts[-1]._status != "running":
            return  # (an attempt ends once: its end occurrence id says so)
        last = attempts[-1]
        attempts[-1] = StepAttempt(last._attempt_id, last._started_at, at, "suspended")
        waiting = payload.get("waitingFor")
        links = self._links()
        named = [
            child
            for child in (waiting if waiting.__class__ is list else ())
            if child.__class__ is str
        ]
        children = {child for child in named if child not in links.ended}
        on_any = payload.get("resumeOn") == "any"
        if on_any and len(children) < len(set(named)):
            children = set()  # (one of them ended already: due again now)
        step._waiting = frozenset(children)
        links.changed_steps.discard(path)
        links.stop_waiting(path)
        if children:
            links.waiting[path] = children
            if on_any:
                links.resume_on_any.add(path)
            links.changed()

    def _on_sub_run_started(self, payload: dict[str, Any], at: Any, event_type: str) -> None:
        child = payload.get("childRunId")
        if child.__class__ is not str:
            return
        links = self._links()
        if child not in links.started_set:
            links.started.append(child)
            links.started_set.add(child)
            links.changed()

    def _on_sub_run_ended(self, payload: dict[str, Any], at: Any, event_type: str) -> None:
        child = payload.get("childRunId")
        if child.__class__ is not str:
            return
        links = self._links()
        if child in links.ended:
            return
        if ledger_touches(payload):
            self._own_ledger().on_sub_run_ended(payload)
        links.ended.add(child)
        links.changed()
        links.child_ended(child)

    def _on_approval_decided(self, payload: dict[str, Any], at: Any, event_type: str) -> None:
        # A step suspended for a person's decision waits for the approval id as for a child.
        approval = payload.get("approvalId")
        if approval.__class__ is not str:
            return
        links = self._links()
        if approval in links.ended:
            return
        links.ended.add(approval)
        links.changed()
        links.child_ended(approval)

    def _on_run_completed(self, payload: dict[str, Any], at: Any, event_type: str) -> None:
        self._status = "completed"
        self._finished_at = at
        self._error = ABSENT
        if "output" in payload:
            self._output = payload["output"]
        output_ref = payload.get("outputRef")
        if _is_ref(output_ref):
            self._output_ref = output_ref
            self._add_artifact(output_ref)

    def _on_run_failed(self, payload: dict[str, Any], at: Any, event_type: str) -> None:
        self._status = "failed"
        self._finished_at = at
        self._error = payload.get("error", ABSENT)


def _ignore(builder: RunStateBuilder, payload: dict[str, Any], at: Any, event_type: str) -> None:
    return None


_Handler: TypeAlias = Callable[[RunStateBuilder, dict[str, Any], Any, str], None]

_HANDLERS: dict[str, _Handler] = {
    "RunStarted": RunStateBuilder._on_run_started,
    "WorkflowVersionRegistered": RunStateBuilder._on_run_started,
    "StepScheduled": RunStateBuilder._on_step_scheduled,
    "StepAttemptStarted": RunStateBuilder._on_attempt_started,
    "ModelCallCompleted": RunStateBuilder._on_model_call,
    "harness.model.responded": RunStateBuilder._on_model_call,
    "HarnessModelResponded": RunStateBuilder._on_model_call,  # legacy name
    BUDGET_RESERVED_EVENT_TYPE: RunStateBuilder._on_budget_reserved,
    "harness.model.failed": RunStateBuilder._on_model_failed,
    BUDGET_EVENT_TYPE: RunStateBuilder._on_budget,
    BUDGET_DRAWN_EVENT_TYPE: RunStateBuilder._on_budget_drawn,
    BUDGET_LENT_EVENT_TYPE: RunStateBuilder._on_budget_lent,
    "ArtifactCreated": RunStateBuilder._on_artifact_created,
    "StepCompleted": RunStateBuilder._on_step_completed,
    "StepFailed": RunStateBuilder._on_step_failed,
    "RunCompleted": RunStateBuilder._on_run_completed,
    "RunFailed": RunStateBuilder._on_run_failed,
    STEP_SUSPENDED: RunStateBuilder._on_step_suspended,
    SUB_RUN_STARTED: RunStateBuilder._on_sub_run_started,
    SUB_RUN_ENDED: RunStateBuilder._on_sub_run_ended,
    APPROVAL_DECIDED: RunStateBuilder._on_approval_decided,
    "ParallelGroupStarted": apply_parallel,
    "ParallelBranchScheduled": apply_parallel,
    "ParallelBranchCompleted": apply_parallel,
    "ParallelBranchFailed": apply_parallel,
    "ParallelGroupCompleted": apply_parallel,
    "ParallelGroupFailed": apply_parallel,
    # Session rollups repeat the model calls above: counting them would double the bill.
    "harness.session.completed": _ignore,
    "HarnessSessionCompleted": _ignore,
}

#: The event types whose payloads the fold reads (it only counts the others).
FOLDED_EVENT_TYPES: frozenset[str] = frozenset(
    event_type for event_type, handler in _HANDLERS.items() if handler is not _ignore
)
