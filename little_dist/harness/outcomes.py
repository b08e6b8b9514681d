"""``report_outcome``: an application's verdict on a run, recorded as ``outcome.reported``.

Upstream's ``reportHarnessOutcome`` (little-harness ``outcomes/``): a host that observes how a
run turned out (a user's thumbs-down, a grader's score) records it on the run as a side-channel
event. An outcome is an observation, never a gate: it is not an input to the run (the fold
and replay ignore it), it may be written after the run ended (it is one of
:data:`~little_dist.events.AFTER_END_EVENT_TYPES`), and reporting one never raises: a missing
run, a refused append or a bad field is returned in :attr:`OutcomeReport.errors` and the run
is untouched.

The payload is upstream's metadata: the caller's ``metadata`` first, then ``status``
(``success`` / ``failure`` / ``partial``), ``source`` (default ``"programmatic"``) and, only
when given, ``retracted``, ``score``, ``detail``, ``reporter``, ``reportKey``, ``stepPath``
and ``promptHash``. Without ``prompt_hash`` the prompt is joined as upstream joins it, best
effort: the ``promptHash`` of the run's latest ``harness.model.called`` (of ``step_path``
when given); none is written when the run has no model call. Joinable fields are omitted
when unknown, never written as placeholders.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from pydantic import ValidationError

from little_dist.event_types.harness_trace_payloads import OutcomeReportedPayload
from little_dist.events import Event, EventInput

if TYPE_CHECKING:
    from little_dist.world.base import World

__all__ = ["OUTCOME_REPORTED", "OutcomeReport", "report_outcome"]

OUTCOME_REPORTED: Final = "outcome.reported"
_DEFAULT_SOURCE: Final = "programmatic"


@dataclass(frozen=True)
class OutcomeReport:
    """What :func:`report_outcome` did: ``recorded`` and the ``event`` when the append
    landed; ``errors`` (one line each) for whatever stopped it."""

    recorded: bool
    event: Event | None = None
    errors: list[str] = field(default_factory=list)


def report_outcome(
    world: World,
    run_id: str,
    *,
    status: str,
    source: str = _DEFAULT_SOURCE,
    score: float | None = None,
    detail: str | None = None,
    reporter: str | None = None,
    report_key: str | None = None,
    step_path: str | None = None,
    prompt_hash: str | None = None,
    retracted: bool | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> OutcomeReport:
    """Append ``outcome.reported`` to ``run_id``'s log (see the module docstring); never raises."""
    try:
        events = world.list_events(run_id)
    except Exception as exc:
        return OutcomeReport(False, errors=[f"cannot read run {run_id}: {_one_line(exc)}"])
    if not events:
        return OutcomeReport(False, errors=[f"no such run: {run_id}"])
    if prompt_hash is None:
        prompt_hash = _latest_prompt_hash(events, step_path)
    optional = {
        "retracted": retracted,
        "score": score,
        "detail": detail,
        "reporter": reporter,
        "reportKey": report_key,
        "stepPath": step_path,
        "promptHash": prompt_hash,
    }
    payload: dict[str, Any] = {
        **dict(metadata or {}),
        "status": status,
        "source": source,
        **{key: value for key, value in optional.items() if value is not None},
    }
    try:
        OutcomeReportedPayload.model_validate(payload)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}"
            for error in exc.errors()
        ]
        return OutcomeReport(False, errors=[f"invalid outcome: {'; '.join(problems)}"])
    try:
        event = world.append(run_id, EventInput(type=OUTCOME_REPORTED, payload=payload))
    except Exception as exc:
        return OutcomeReport(False, errors=[f"cannot record the outcome: {_one_line(exc)}"])
    return OutcomeReport(True, event)


def _latest_prompt_hash(events: list[Event], step_path: str | None) -> str | None:
    for event in reversed(events):
        if event.type != "harness.model.called":
            continue
        if step_path is not None and event.payload.get("stepPath") != step_path:
            continue
        request = event.payload.get("request")
        value = event.payload.get("promptHash")
        if not isinstance(value, str) and isinstance(request, Mapping):
            value = request.get("promptHash")
        if isinstance(value, str) and value:
            return value
    return None


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())
