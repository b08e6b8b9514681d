"""The run report: tokens, cache hits, dollars and timing per step, from a run's events.

:func:`build_run_report` folds the log with :func:`little_dist.run_state.
materialize_run_state` and then follows upstream's ``run-report.ts``: one row per step, an
``(unattributed)`` row for model calls recorded without a step, a ``TOTAL`` row, and
``hasUnpricedCalls``. :attr:`RunReport.steps` are in run order (the order the steps first
appear in the log); upstream sorts them as JavaScript's ``localeCompare`` does, and so do the
upstream forms of the table and the JSON (:func:`upstream_rows`). Dollars come only from
registry rates (see :mod:`little_dist.pricing`), or from a ``pricing_fallback`` the caller
passes for models the registry lacks; a ``costUsd`` inside a payload is never read.

Two things upstream's report has no room for are ours: the model calls that finished after
the run had ended (refused by the log, kept in the run's late record: the ``late`` row, whose
usage the ``TOTAL`` includes, so no spend goes missing), and, for a failed run, why it failed
(:attr:`RunReport.failure`: cause code, message, step).

On top of upstream's rows the report keeps, per row, the number of attempts and the
duration, and a timeline: one :class:`AttemptSpan` per step attempt with its start, end,
status and the model usage recorded during it. The HTML page draws them;
:func:`report_to_json` leaves them out unless asked (``detailed=True``,
``include_timeline=True``), so by default the JSON is exactly upstream's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from little_dist.events import normalize_event_type
from little_dist.pricing import (
    ModelIdentity,
    ModelUsage,
    Number,
    PriceFallback,
    UsageTotals,
    add_priced_call,
    cache_hit_share,
    empty_usage_totals,
    merge_usage_totals,
    price_model_call,
)
from little_dist.report.collation import js_property_order, locale_sort_key
from little_dist.report.failure import RunFailure, run_failure
from little_dist.run_state import RunState, materialize_run_state

__all__ = [
    "LATE",
    "UNATTRIBUTED",
    "AttemptSpan",
    "RunReport",
    "RunReportRow",
    "build_run_report",
    "calls_usage",
    "report_to_json",
    "run_report",
    "upstream_rows",
]

UNATTRIBUTED = "(unattributed)"
LATE = "(after the run ended)"
TOTAL = "TOTAL"
#: Decimals of the dollar figures in our JSON: below float noise (0.00028230000000000003),
#: far below a cent.
_MONEY_DECIMALS = 10


class RunReportRow(BaseModel):
    """One line of the report, field for field as upstream's ``RunReportRow``.

    ``attempts`` and ``duration_ms`` are ours (in the JSON only with ``detailed=True``):
    the number of attempts and the time from the first attempt's start to the last
    attempt's end. On ``TOTAL`` they are the sum of the steps' attempts and the run's wall
    clock; on ``(unattributed)`` they are ``0`` and ``None``.
    """

    model_config = ConfigDict(frozen=True, populate_by_name=True, serialize_by_alias=True)

    step_path: str = Field(alias="stepPath")
    status: str
    input_tokens: Number = Field(alias="inputTokens")
    cached_input_tokens: Number = Field(alias="cachedInputTokens")
    output_tokens: Number = Field(alias="outputTokens")
    reasoning_tokens: Number = Field(alias="reasoningTokens")
    cache_hit_share: float = Field(alias="cacheHitShare")
    cost_usd: float | None = Field(alias="costUsd")
    priced_calls: int = Field(alias="pricedCalls")
    unpriced_calls: int = Field(alias="unpricedCalls")
    attempts: int = Field(default=0, exclude=True)
    duration_ms: float | None = Field(default=None, exclude=True)


class AttemptSpan(BaseModel):
    """One step attempt on the run's timeline."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, serialize_by_alias=True)

    step_path: str = Field(alias="stepPath")
    attempt_id: str = Field(alias="attemptId")
    attempt_number: int = Field(alias="attemptNumber")
    status: str
    started_at: str = Field(alias="startedAt")
    finished_at: str | None = Field(default=None, alias="finishedAt")
    duration_ms: float | None = Field(default=None, alias="durationMs")
    usage: UsageTotals


class RunReport(BaseModel):
    """A run's cost report (upstream's ``RunReport``) plus its attempt timeline."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, serialize_by_alias=True)

    run_id: str = Field(alias="runId")
    status: str
    steps: tuple[RunReportRow, ...]
    unattributed: RunReportRow | None = None
    """Model calls recorded without a ``stepPath``; present only when there are some."""
    late: RunReportRow | None = Field(default=None, exclude=True)
    """Model calls that finished after the run had ended (the run's late record, not its
    log); present only when there are some. ``total`` includes them."""
    failure: RunFailure | None = Field(default=None, exclude=True)
    """Why the run failed (``None`` unless it did)."""
    total: RunReportRow
    has_unpriced_calls: bool = Field(alias="hasUnpricedCalls")
    timeline: tuple[AttemptSpan, ...] = Field(default=(), exclude=True)
    started_at: str | None = Field(default=None, exclude=True)
    finished_at: str | None = Field(default=None, exclude=True)
    last_event_at: str | None = Field(default=None, exclude=True)
    """``recordedAt`` of the newest event: where a still-running attempt's bar ends."""


# --- what the report reads from the folded run state -------------------------------------


class _Attempt(Protocol):
    @property
    def attempt_id(self) -> str: ...
    @property
    def started_at(self) -> str: ...
    @property
    def finished_at(self) -> str | None: ...
    @property
    def status(self) -> str: ...


class _Step(Protocol):
    @property
    def step_path(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def usage(self) -> UsageTotals: ...
    @property
    def attempts(self) -> Sequence[_Attempt]: ...


class _State(Protocol):
    @property
    def run_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def usage(self) -> UsageTotals: ...
    @property
    def steps(self) -> Mapping[str, _Step]: ...
    @property
    def started_at(self) -> str | None: ...
    @property
    def finished_at(self) -> str | None: ...


def _parse_time(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _duration_ms(start: str | None, end: str | None) -> float | None:
    started, finished = _parse_time(start), _parse_time(end)
    if started is None or finished is None:
        return None
    try:
        ms = (finished - started).total_seconds() * 1000
    except TypeError:  # one offset-aware, one naive: no meaningful difference
        return None
    # Whole milliseconds print as JSON integers (2000, not 2000.0), as a JS engine would.
    return int(ms) if ms.is_integer() else ms


def _row(
    step_path: str,
    status: str,
    usage: UsageTotals,
    *,
    attempts: int = 0,
    duration_ms: float | None = None,
) -> RunReportRow:
    return RunReportRow(
        step_path=step_path,
        status=status,
        input_tokens=usage.input_tokens,
        cached_input_tokens=usage.cached_input_tokens,
        output_tokens=usage.output_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        cache_hit_share=cache_hit_share(usage),
        cost_usd=usage.cost_usd,
        priced_calls=usage.priced_calls,
        unpriced_calls=usage.unpriced_calls,
        attempts=attempts,
        duration_ms=duration_ms,
    )


def _residual(total: UsageTotals, attributed: UsageTotals) -> UsageTotals | None:
    """Run totals minus per-step totals: calls recorded without a step, if any."""
    priced = total.priced_calls - attributed.priced_calls
    unpriced = total.unpriced_calls - attributed.unpriced_calls
    if priced <= 0 and unpriced <= 0:
        return None
    cost: float | None
    if priced == 0:
        cost = 0 if unpriced == 0 else None
    else:
        cost = (total.cost_usd or 0) - (attributed.cost_usd or 0)
    return UsageTotals(
        input_tokens=total.input_tokens - attributed.input_tokens,
        output_tokens=total.output_tokens - attributed.output_tokens,
        cached_input_tokens=total.cached_input_tokens - attributed.cached_input_tokens,
        reasoning_tokens=total.reasoning_tokens - attributed.reasoning_tokens,
        cost_usd=cost,
        priced_calls=priced,
        unpriced_calls=unpriced,
    )


def run_report(
    state: _State,
    *,
    attempt_usage: Mapping[str, Sequence[UsageTotals]] | None = None,
    last_event_at: str | None = None,
    late_usage: UsageTotals | None = None,
) -> RunReport:
    """Build the report from an already folded run state.

    ``attempt_usage`` (step path -> usage per attempt, in attempt order) labels the
    timeline's bars; :func:`build_run_report` computes it from the events. ``late_usage``:
    the usage of the run's late record (:func:`calls_usage`), added as the ``late`` row and
    to the total.
    """
    ordered = [state.steps[key] for key in js_property_order(state.steps)]
    per_attempt = attempt_usage or {}

    rows: list[RunReportRow] = []
    timeline: list[AttemptSpan] = []
    for step in ordered:
        attempts = list(step.attempts)
        usages = per_attempt.get(step.step_path, ())
        for number, attempt in enumerate(attempts, start=1):
            timeline.append(
                AttemptSpan(
                    step_path=step.step_path,
                    attempt_id=attempt.attempt_id,
                    attempt_number=number,
                    status=attempt.status,
                    started_at=attempt.started_at,
                    finished_at=attempt.finished_at,
                    duration_ms=_duration_ms(attempt.started_at, attempt.finished_at),
                    usage=usages[number - 1] if number <= len(usages) else empty_usage_totals(),
                )
            )
        duration = (
            _duration_ms(attempts[0].started_at, attempts[-1].finished_at) if attempts else None
        )
        rows.append(
            _row(
                step.step_path,
                step.status,
                step.usage,
                attempts=len(attempts),
                duration_ms=duration,
            )
        )
    timeline.sort(key=lambda span: _parse_time(span.started_at) or datetime.max)

    attributed = empty_usage_totals()
    for step in ordered:
        attributed = merge_usage_totals(attributed, step.usage)
    residual = _residual(state.usage, attributed)
    late = late_usage if late_usage is not None and _calls(late_usage) else None
    total = state.usage if late is None else merge_usage_totals(state.usage, late)

    return RunReport(
        run_id=state.run_id,
        status=state.status,
        steps=tuple(rows),
        unattributed=None if residual is None else _row(UNATTRIBUTED, state.status, residual),
        late=None if late is None else _row(LATE, state.status, late),
        failure=run_failure(state) if isinstance(state, RunState) else None,
        total=_row(
            TOTAL,
            state.status,
            total,
            attempts=sum(len(step.attempts) for step in ordered),
            duration_ms=_run_duration(state),
        ),
        has_unpriced_calls=total.unpriced_calls > 0,
        timeline=tuple(timeline),
        started_at=state.started_at,
        finished_at=state.finished_at,
        last_event_at=last_event_at,
    )


def _calls(usage: UsageTotals) -> int:
    return usage.priced_calls + usage.unpriced_calls


def upstream_rows(report: RunReport) -> tuple[RunReportRow, ...]:
    """The step rows in upstream's order: sorted as ``localeCompare`` sorts their paths
    (``Array.prototype.sort`` is stable: ties keep the run order)."""
    return tuple(sorted(report.steps, key=lambda row: locale_sort_key(row.step_path)))


def _run_duration(state: _State) -> float | None:
    return _duration_ms(state.started_at, state.finished_at)


def _field(event: Any, name: str, attribute: str) -> Any:
    if isinstance(event, Mapping):
        return event.get(name)
    return getattr(event, attribute, None)


def _event_dicts(events: Iterable[Any]) -> list[dict[str, Any]]:
    """Events as upstream-shaped dicts, whether given as dicts or ``Event`` models."""
    out: list[dict[str, Any]] = []
    for event in events:
        if isinstance(event, Mapping):
            out.append(dict(event))
            continue
        dumped: dict[str, Any] = {
            "eventId": _field(event, "eventId", "event_id"),
            "runId": _field(event, "runId", "run_id"),
            "sequence": _field(event, "sequence", "sequence"),
            "type": _field(event, "type", "type"),
            "recordedAt": _field(event, "recordedAt", "recorded_at"),
            "payload": _field(event, "payload", "payload"),
        }
        occurrence = _field(event, "occurrenceId", "occurrence_id")
        if occurrence is not None:
            dumped["occurrenceId"] = occurrence
        out.append(dumped)
    return out


_MODEL_CALL_TYPES = ("ModelCallCompleted", "harness.model.responded")


def _model_call(event_type: str, payload: Mapping[str, Any]) -> tuple[Any, Any] | None:
    """(usage, model) of a model-call event, as the run-state fold reads them."""
    if event_type == "ModelCallCompleted":
        return payload.get("usage"), payload.get("model")
    if event_type == "harness.model.responded":
        response = payload.get("response")
        usage = response.get("usage") if isinstance(response, Mapping) else None
        return usage, payload.get("model")
    if event_type == "harness.model.failed":  # an interrupted call's estimate, if any
        error = payload.get("error")
        if isinstance(error, Mapping) and isinstance(error.get("usage"), Mapping):
            return error["usage"], error.get("model")
    return None


def attempt_usage_from_events(
    events: Sequence[Mapping[str, Any]], *, fallback: PriceFallback | None = None
) -> dict[str, list[UsageTotals]]:
    """Model usage per step attempt: each call counts toward the step's latest attempt.

    A call recorded before a step's first attempt counts toward that first attempt.
    ``fallback`` prices models the registry lacks, as in the fold.
    """
    usage: dict[str, list[UsageTotals]] = {}
    started: dict[str, int] = {}
    for event in events:
        payload = event.get("payload")
        if not isinstance(payload, Mapping):
            continue
        step_path = payload.get("stepPath")
        if not isinstance(step_path, str):
            continue
        event_type = normalize_event_type(str(event.get("type")))
        if event_type == "StepAttemptStarted":
            started[step_path] = started.get(step_path, 0) + 1
            continue
        call = _model_call(event_type, payload)
        if call is None or not isinstance(call[0], Mapping):
            continue
        priced = price_model_call(
            ModelIdentity.from_payload(call[1]),
            ModelUsage.from_payload(call[0]),
            fallback=fallback,
        )
        index = max(started.get(step_path, 0), 1) - 1
        attempts = usage.setdefault(step_path, [])
        while len(attempts) <= index:
            attempts.append(empty_usage_totals())
        attempts[index] = add_priced_call(attempts[index], priced)
    return usage


def calls_usage(events: Iterable[Any], *, fallback: PriceFallback | None = None) -> UsageTotals:
    """The usage of the model calls among ``events`` (dicts, ``Event`` models or the
    world's ``LateEvent`` records), priced as the fold prices them."""
    totals = empty_usage_totals()
    for event in events:
        event_type = _field(event, "type", "type")
        payload = _field(event, "payload", "payload")
        if not isinstance(payload, Mapping):
            continue
        call = _model_call(normalize_event_type(str(event_type)), payload)
        if call is None or not isinstance(call[0], Mapping):
            continue
        priced = price_model_call(
            ModelIdentity.from_payload(call[1]),
            ModelUsage.from_payload(call[0]),
            fallback=fallback,
        )
        totals = add_priced_call(totals, priced)
    return totals


def build_run_report(
    events: Iterable[Any],
    *,
    run_id: str | None = None,
    pricing_fallback: PriceFallback | None = None,
    late: Iterable[Any] = (),
) -> RunReport:
    """Fold a run's events (dicts or ``Event`` models, in sequence order) into its report.

    ``run_id`` is needed only for an empty log. ``late``: the run's late record
    (:meth:`~little_dist.world.base.World.late_events`), counted in the ``late`` row and the
    total. ``pricing_fallback`` prices models the
    registry lacks (e.g. :func:`little_dist.litellm_prices.litellm_price_fallback`, which
    ``little report`` passes); ``None`` (the default) is upstream's registry-only pricing.
    Raises what :func:`little_dist.run_state.materialize_run_state` raises for a log that
    breaks the envelope's invariants (foreign run id, gap or duplicate sequence).
    """
    fallback = pricing_fallback
    dicts = _event_dicts(events)
    state = materialize_run_state(dicts, run_id=run_id, pricing_fallback=fallback)
    last_event_at = dicts[-1].get("recordedAt") if dicts else None
    return run_report(
        state,
        attempt_usage=attempt_usage_from_events(dicts, fallback=fallback),
        last_event_at=last_event_at if isinstance(last_event_at, str) else None,
        late_usage=calls_usage(late, fallback=fallback),
    )


def _round_money(value: Any) -> Any:
    """``value`` (JSON data) with every ``costUsd`` float rounded to 10 decimals."""
    if isinstance(value, dict):
        return {
            key: round(item, _MONEY_DECIMALS)
            if key == "costUsd" and isinstance(item, float)
            else _round_money(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_round_money(item) for item in value]
    return value


def _row_json(row: RunReportRow, *, detailed: bool) -> dict[str, Any]:
    data = row.model_dump(mode="json")
    if detailed:
        data["attempts"] = row.attempts
        data["durationMs"] = row.duration_ms
    return data


def report_to_json(
    report: RunReport, *, include_timeline: bool = False, detailed: bool = False
) -> dict[str, Any]:
    """Upstream's JSON shape of the report (``unattributed`` only when present), its steps
    in upstream's order.

    A run with a late record (model calls that finished after its end) gets a ``late`` row
    in any form: its usage is in ``total``. Our additions, off by default so the default
    output is upstream's: ``detailed=True`` lists the steps in run order, adds ``attempts``
    and ``durationMs`` (milliseconds or ``null``) to every row (steps, ``unattributed``,
    ``late`` and ``total``), rounds dollars to 10 decimals, and, for a failed run, adds
    ``failure`` (``causeCode``, ``message``, ``stepPath``); ``include_timeline=True`` adds a
    ``timeline`` array of attempt spans.
    """
    data = report.model_dump(mode="json")
    if report.unattributed is None:
        data.pop("unattributed", None)
    data["steps"] = [_row_json(row, detailed=False) for row in upstream_rows(report)]
    if report.late is not None:
        data["late"] = _row_json(report.late, detailed=detailed)
    if report.failure is not None and detailed:
        data["failure"] = report.failure.to_json()
    if detailed:
        data["steps"] = [_row_json(row, detailed=True) for row in report.steps]
        data["total"] = _row_json(report.total, detailed=True)
        if report.unattributed is not None:
            data["unattributed"] = _row_json(report.unattributed, detailed=True)
    if include_timeline:
        data["timeline"] = [span.model_dump(mode="json") for span in report.timeline]
    return _round_money(data) if detailed else data
