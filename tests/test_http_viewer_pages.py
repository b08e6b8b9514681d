"""The live viewer's HTML (little_dist.http.viewer.pages and .calls), without a server.

What a run's log holds is text the viewer shows, never markup it runs: step names, tool
names, output and error messages are escaped. The run page links a sub-run to its parent
and a parent to its sub-runs; the cancel button is there only for a token that may cancel
a run that has not ended. The calls are listed per attempt with their tokens and dollars.
"""

from __future__ import annotations

from typing import Any

from little_dist.events import Event
from little_dist.http.viewer.calls import step_calls
from little_dist.http.viewer.pages import RunPage, run_fragment, runs_fragment, shell
from little_dist.report import build_run_report
from little_dist.report.runs import RunSummary
from little_dist.subruns.links import sub_run_ends, sub_run_starts
from tests.test_report import HOSTILE_STEP, _parse, retry_run_events

HOSTILE = '</pre><script>window.__xss=1</script><img src=x onerror="window.__xss=2">'
CHILD = "run_sub_0123456789abcdef0123456789abcdef"


def _events(extra: list[dict[str, Any]] = ()) -> list[Event]:  # type: ignore[assignment]
    raw = retry_run_events()
    for entry in extra:
        raw.append({**raw[-1], **entry, "sequence": len(raw) + 1})
    for index, entry in enumerate(raw, start=1):
        entry["eventId"] = f"evt_{index:016x}"
    return [Event.model_validate(entry) for entry in raw]


TOOL_EVENTS: list[dict[str, Any]] = [
    {
        "type": "harness.tool_call.started",
        "payload": {
            "stepPath": "publish",
            "callId": "c1",
            "caller": "model",
            "turn": 1,
            "toolName": HOSTILE,
            "args": {},
        },
    },
    {
        "type": "harness.tool_call.failed",
        "payload": {"stepPath": "publish", "callId": "c1", "durationMs": 1500, "error": {}},
    },
    {
        "type": "little.subrun.started",
        "payload": {
            "childRunId": CHILD,
            "workflowId": "kids.one",
            "toolName": "kid",
            "toolCallId": "tool:publish:1:1",
            "stepPath": "publish",
        },
    },
]


def _page(*, may_cancel: bool, status: dict[str, Any], parent: bool = False) -> RunPage:
    events = _events(TOOL_EVENTS)
    return RunPage(
        report=build_run_report(events),
        status=status,
        workflow="docs.digest",
        last_sequence=events[-1].sequence,
        last_type=events[-1].type,
        calls=step_calls(events),
        children=sub_run_starts(events),
        child_ends=sub_run_ends(events),
        parent={"parentRunId": "run_mother", "parentStepPath": HOSTILE} if parent else None,
        budget=None,
        may_cancel=may_cancel,
    )


RUNNING = {"status": "running", "startedAt": "2026-08-07T00:00:01.000Z"}
FAILED = {
    "status": "failed",
    "output": {"text": HOSTILE},
    "failure": {"causeCode": "tool_error", "message": HOSTILE, "stepPath": HOSTILE_STEP},
}


def test_run_data_is_text_never_markup() -> None:
    html = run_fragment(_page(may_cancel=True, status=FAILED, parent=True))
    parsed = _parse(html)
    tags = {tag for tag, _ in parsed.tags}
    assert "script" not in tags and "img" not in tags
    assert not any(name.startswith("on") for _, attrs in parsed.tags for name in attrs), (
        "an event-handler attribute made it into the page"
    )
    text = "".join(parsed.text)
    assert text.count(HOSTILE) == 3  # the failure, the tool's name, the parent's step
    assert '"text": "</pre><script>window.__xss=1</script><img src=x onerror=\\"' in text
    assert HOSTILE_STEP in text


def test_sub_runs_link_both_ways_and_the_failure_is_shown() -> None:
    parsed = _parse(run_fragment(_page(may_cancel=False, status=FAILED, parent=True)))
    links = {attrs.get("class"): attrs.get("href") for tag, attrs in parsed.tags if tag == "a"}
    assert links["child"] == f"/ui/runs/{CHILD}"
    assert links["parent"] == "/ui/runs/run_mother"
    text = "".join(parsed.text)
    assert f"Why it failed: tool_error in step {HOSTILE_STEP}: {HOSTILE}" in text


def test_the_cancel_button_needs_the_scope_and_a_run_that_has_not_ended() -> None:
    def has_button(page: RunPage) -> bool:
        return any(attrs.get("id") == "cancel-run" for _, attrs in _parse(run_fragment(page)).tags)

    assert has_button(_page(may_cancel=True, status=RUNNING))
    assert not has_button(_page(may_cancel=False, status=RUNNING))
    assert not has_button(_page(may_cancel=True, status=FAILED))
    asked = {**RUNNING, "cancelRequested": True}
    assert not has_button(_page(may_cancel=True, status=asked))
    root = _parse(run_fragment(_page(may_cancel=True, status=RUNNING))).tags[0][1]
    assert root["data-ended"] == "0" and root["data-last-sequence"] == str(16 + len(TOOL_EVENTS))


def test_calls_are_listed_per_attempt_with_tokens_and_dollars() -> None:
    calls = step_calls(_events(TOOL_EVENTS))
    summarize = calls["summarize"]
    assert [(a.number, a.attempt_id, a.status) for a in summarize.attempts] == [
        (1, "s1", "failed"),
        (2, "s2", "completed"),
    ]
    first = summarize.attempts[0].models[0]
    assert (first.model, first.input_tokens, first.output_tokens) == (
        "openai.chat/gpt-4o",
        1000,
        500,
    )
    assert first.cost_usd is not None and abs(first.cost_usd - 0.0075) < 1e-9
    assert calls[HOSTILE_STEP].attempts[0].models[0].cost_usd is None  # unpriced: no dollars
    publish = calls["publish"].attempts[0]
    assert [(t.tool, t.status, t.duration_ms) for t in publish.tools] == [(HOSTILE, "failed", 1500)]
    text = "".join(_parse(run_fragment(_page(may_cancel=False, status=RUNNING))).text)
    assert "model openai.chat/gpt-4o turn 1: 1,000 in (0 cached), 500 out, $0.007500" in text
    assert "attempt 2" in text


def test_the_runs_list_and_the_shell_escape_what_they_show() -> None:
    run = RunSummary(
        run_id="run_a",
        workflow=HOSTILE,
        status="failed",
        started_at="2026-08-07T00:00:01Z",
        finished_at=None,
        duration_ms=1500,
        cost_usd=0.25,
    )
    parsed = _parse(runs_fragment([run], next_query="?cursor=abc", filtered=False))
    assert "img" not in {tag for tag, _ in parsed.tags}
    assert HOSTILE in "".join(parsed.text)
    hrefs = [attrs["href"] for tag, attrs in parsed.tags if tag == "a"]
    assert hrefs == ["/ui/runs/run_a", "/ui?cursor=abc"]
    page = _parse(shell(title=HOSTILE, page="runs", fragment='/ui/fragments/runs?x="y"'))
    assert "img" not in {tag for tag, _ in page.tags}
    scripts = [attrs for tag, attrs in page.tags if tag == "script"]
    assert scripts == [{"src": "/ui/static/viewer.js", "defer": None}]
