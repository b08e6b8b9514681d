"""What a waiting run says of itself (:mod:`little_dist.fleet.run_waits`), from its log: the
pending calls only, with their deadline and what then applies, none once the run ended; and
the HTML report's note, escaped."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from little_dist.fleet.run_waits import waiting_for_approval, waiting_line
from little_dist.report.html import render_waiting

RUN = "run_waits"
FIRST = f"apr_{'1' * 16}.{RUN}"
SECOND = f"apr_{'2' * 16}.{RUN}"


def _event(kind: str, at: str, **payload: Any) -> SimpleNamespace:
    return SimpleNamespace(type=kind, recorded_at=at, payload=payload)


def _requested(ident: str, at: str, **extra: Any) -> SimpleNamespace:
    return _event(
        "little.approval.requested",
        at,
        approvalId=ident,
        stepPath="pay",
        toolName="refund",
        args={"amount": 42},
        rule={"tool": "refund", "action": "ask"},
        **extra,
    )


def test_pending_calls_are_listed_with_deadline_and_how_to_answer() -> None:
    events = [
        _requested(FIRST, "2026-01-01T00:00:00.000Z"),
        _requested(SECOND, "2026-01-01T00:00:01.000Z", deadlineAt=1767225660000, onTimeout="allow"),
        _event("little.approval.decided", "2026-01-01T00:00:02.000Z", approvalId=FIRST),
    ]
    (wait,) = waiting_for_approval(RUN, events)
    assert wait["approvalId"] == SECOND and wait["since"] == "2026-01-01T00:00:01.000Z"
    assert (wait["deadline"], wait["onTimeout"]) == ("2026-01-01T00:01:00.000Z", "allow")
    assert wait["answer"] == {
        "approve": f"little approvals approve {SECOND} --reason '...'",
        "reject": f"little approvals reject {SECOND} --reason '...'",
        "http": f"POST /v1/approvals/{SECOND}",
    }
    assert waiting_line(wait) == (
        "step pay calls refund: waiting since 2026-01-01T00:00:01.000Z, "
        "deadline 2026-01-01T00:01:00.000Z (then allow)"
    )
    ended = [*events, _event("RunFailed", "2026-01-01T00:00:03.000Z")]
    assert waiting_for_approval(RUN, ended) == []


def test_the_reports_note_escapes_what_the_log_holds() -> None:
    (wait,) = waiting_for_approval(RUN, [_requested(FIRST, "2026-01-01T00:00:00.000Z")])
    wait["toolName"] = "<script>x</script>"
    html = render_waiting([wait])
    assert "Waiting for approval" in html and "no deadline" in html
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert f"little approvals approve {FIRST}" in html
    assert render_waiting([]) == ""
