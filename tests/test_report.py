"""Run report: upstream's rows, table and JSON from the vectors, plus the HTML page."""

from __future__ import annotations

import re
from datetime import datetime
from html.parser import HTMLParser
from typing import Any

import pytest

from little_dist.events import Event
from little_dist.report import (
    build_run_report,
    render_html,
    render_table,
    report_to_json,
)
from little_dist.report.collation import js_property_order, locale_sort_key
from little_dist.report.table import format_duration
from tests.conftest import load_vectors

RUN_REPORTS: list[dict[str, Any]] = load_vectors("pricing")["run_reports"]

HOSTILE_STEP = '<img src=x onerror="alert(1)">&\'</svg>'
"""A step name that is also markup: the page must show it, never run it."""

MINI = {"provider": "openai.responses", "modelId": "gpt-4o-mini"}
GPT4O = {"provider": "openai.chat", "modelId": "gpt-4o"}


def _responded(step: str | None, model: dict[str, str], usage: dict[str, int]) -> dict[str, Any]:
    payload: dict[str, Any] = {"turn": 1, "model": model, "response": {"usage": usage}}
    if step is not None:
        payload["stepPath"] = step
    return {"type": "harness.model.responded", "payload": payload}


def retry_run_events() -> list[dict[str, Any]]:
    """A still-running run: a retried step, a hostile step name, an unpriced and an
    unattributed call, and an attempt with no end yet. One entry per second."""
    steps: list[dict[str, Any]] = [
        {"type": "RunStarted", "payload": {"workflowVersionId": "wfver_1"}},
        {"type": "StepAttemptStarted", "payload": {"stepPath": "extract", "attemptId": "a1"}},
        _responded(
            "extract",
            MINI,
            {"inputTokens": 20000, "cachedInputTokens": 16000, "outputTokens": 2000},
        ),
        {"type": "StepCompleted", "payload": {"stepPath": "extract"}},
        {"type": "StepAttemptStarted", "payload": {"stepPath": "summarize", "attemptId": "s1"}},
        _responded("summarize", GPT4O, {"inputTokens": 1000, "outputTokens": 500}),
        {"type": "StepFailed", "payload": {"stepPath": "summarize", "error": {"message": "x"}}},
        {"type": "StepAttemptStarted", "payload": {"stepPath": "summarize", "attemptId": "s2"}},
        _responded("summarize", MINI, {"inputTokens": 3000, "outputTokens": 200}),
        _responded(None, MINI, {"inputTokens": 400, "outputTokens": 100}),
        {"type": "StepCompleted", "payload": {"stepPath": "summarize"}},
        {"type": "StepAttemptStarted", "payload": {"stepPath": HOSTILE_STEP, "attemptId": "h1"}},
        _responded(HOSTILE_STEP, {"provider": "acme", "modelId": "x"}, {"inputTokens": 10}),
        {"type": "StepCompleted", "payload": {"stepPath": HOSTILE_STEP}},
        {"type": "StepAttemptStarted", "payload": {"stepPath": "publish", "attemptId": "p1"}},
        _responded("publish", MINI, {"inputTokens": 500, "outputTokens": 50}),
    ]
    return [
        {
            "eventId": f"evt_{index:016x}",
            "runId": "run_retry",
            "sequence": index,
            "recordedAt": f"2026-08-07T00:00:{index:02d}.000Z",
            **step,
        }
        for index, step in enumerate(steps, start=1)
    ]


def _ids(vectors: list[dict[str, Any]]) -> list[str]:
    return [v["name"] for v in vectors]


def _resolve(data: Any, path: list[Any]) -> Any:
    for segment in path:
        if isinstance(segment, dict):
            [(key, value)] = segment.items()
            data = next(item for item in data if item[key] == value)
        else:
            data = data[segment]
    return data


def _upstream_report(events: list[Any]) -> Any:
    # Upstream has no price fallback: vectors are priced from the registry only.
    return build_run_report(events, pricing_fallback=None)


@pytest.mark.parametrize("vector", RUN_REPORTS, ids=_ids(RUN_REPORTS))
def test_report_json_matches_upstream(vector: dict[str, Any]) -> None:
    report = _upstream_report(vector["events"])
    assert report_to_json(report) == vector["expected_report"]


@pytest.mark.parametrize("vector", RUN_REPORTS, ids=_ids(RUN_REPORTS))
def test_report_asserted_paths(vector: dict[str, Any]) -> None:
    data = report_to_json(_upstream_report(vector["events"]))
    for check in vector["asserted"]:
        if check.get("absent"):
            assert check["path"][-1] not in data
            continue
        actual = _resolve(data, check["path"])
        if "approx" in check:
            assert abs(actual - check["approx"]) < 0.5 * 10 ** -check["digits"]
        else:
            assert actual == check["equals"]


@pytest.mark.parametrize("vector", RUN_REPORTS, ids=_ids(RUN_REPORTS))
def test_report_table_matches_upstream(vector: dict[str, Any]) -> None:
    table = render_table(_upstream_report(vector["events"]))
    assert table == vector["expected_table"]
    for needle in vector["table_contains"]:
        assert needle in table
    for needle in vector["table_not_contains"]:
        assert needle not in table


def test_report_accepts_event_models() -> None:
    vector = RUN_REPORTS[0]
    models = [Event.model_validate(event) for event in vector["events"]]
    assert report_to_json(_upstream_report(models)) == vector["expected_report"]


def test_report_ignores_payload_cost_and_session_rollups_and_reads_legacy_names() -> None:
    events = [
        {"type": "RunStarted", "payload": {"workflowVersionId": "wfver_1"}},
        {
            "type": "HarnessModelResponded",
            "payload": {
                "stepPath": "a",
                "costUsd": 999,
                "model": {"provider": "openai", "modelId": "gpt-4o"},
                "response": {"usage": {"inputTokens": 1_000_000, "costUsd": 999}},
            },
        },
        {
            "type": "harness.session.completed",
            "payload": {"usage": {"inputTokens": 5, "outputTokens": 5, "costUsd": 1}},
        },
        {"type": "RunCompleted", "payload": {}},
    ]
    log = [
        {
            "eventId": f"e{i}",
            "runId": "run_x",
            "sequence": i,
            "recordedAt": f"2026-01-01T00:00:0{i}.000Z",
            **event,
        }
        for i, event in enumerate(events, start=1)
    ]
    data = report_to_json(build_run_report(log))
    assert data["total"]["costUsd"] == 2.5
    assert data["total"]["inputTokens"] == 1_000_000
    assert [row["stepPath"] for row in data["steps"]] == ["a"]


def test_rows_sort_like_locale_compare() -> None:
    names = ["b", "B", "a_b", "a-b", "ab", "A", "a", "10", "9", "a.b", "é", "e", "f"]
    ordered = sorted(names, key=locale_sort_key)
    # Node 20: [...].sort((x, y) => x.localeCompare(y))
    assert ordered == ["10", "9", "a", "A", "a_b", "a-b", "a.b", "ab", "b", "B", "e", "é", "f"]


def test_js_property_order_lists_array_index_keys_first() -> None:
    keys = ["b", "10", "a", "2", "01", "4294967295"]
    assert js_property_order(keys) == ["2", "10", "b", "a", "01", "4294967295"]


# --- our additions: attempts and duration, price fallback ---------------------------------

RETRY_TABLE = f"""Run run_retry (running)

STEP                                    ATTEMPTS  DURATION     IN  CACHED  CACHE%   OUT           CALLS  COST (USD)
--------------------------------------  --------  --------  -----  ------  ------  ----  --------------  ----------
extract                                        1     2.0 s  20000   16000   80.0%  2000               1    0.003000
summarize                                      2     6.0 s   4000       0    0.0%   700               2    0.008070
{HOSTILE_STEP}         1     2.0 s     10       0    0.0%     0  1 (1 unpriced)         n/a
publish                                        1         —    500       0    0.0%    50               1    0.000105
(outside steps)                                —         —    400       0    0.0%   100               1    0.000120
--------------------------------------  --------  --------  -----  ------  ------  ----  --------------  ----------
TOTAL                                          5         —  24910   16000   64.2%  2850  6 (1 unpriced)    0.011295

Note: (outside steps) counts model calls recorded without a step (a planner's, for one).
Note: 1 model call(s) have no price in the model registry (unpriced): their tokens are counted, their cost is not.
"""  # noqa: E501


def test_detailed_table_adds_attempts_and_duration_in_run_order_with_words() -> None:
    report = build_run_report(retry_run_events())
    assert render_table(report, detailed=True) == RETRY_TABLE


def _in_words(cell: str) -> str:
    """Upstream's cell as the detailed table says it."""
    if cell == "(unattributed)":
        return "(outside steps)"
    signs = re.fullmatch(r"(\d+)\+(\d+)\?", cell)
    if signs:
        priced, unpriced = int(signs[1]), int(signs[2])
        return f"{priced + unpriced} ({unpriced} unpriced)"
    return cell


@pytest.mark.parametrize("vector", RUN_REPORTS, ids=_ids(RUN_REPORTS))
def test_detailed_table_is_upstreams_plus_two_columns_in_words(vector: dict[str, Any]) -> None:
    report = _upstream_report(vector["events"])
    upstream = render_table(report).splitlines()
    detailed = render_table(report, detailed=True).splitlines()
    head = 3 if report.failure is not None else 2  # (the Cause: line)

    def cells(line: str) -> list[str]:
        return re.split(r"\s{2,}", line.strip())  # columns are at least two spaces apart

    assert cells(detailed[head]) == ["STEP", "ATTEMPTS", "DURATION", *cells(upstream[2])[1:]]

    # Every body row keeps upstream's cells (in words), with attempts and duration after the
    # name; the steps in run order, which is upstream's order sorted.
    def body(lines: list[str], first: int) -> list[list[str]]:
        end = next((i for i, line in enumerate(lines) if i > first and not line), len(lines))
        return [cells(line) for line in lines[first:end] if line[0] != "-"]

    ours = [[row[0], *row[3:]] for row in body(detailed, head + 2)]
    theirs = [[_in_words(cell) for cell in row] for row in body(upstream, 4)]
    assert sorted(ours) == sorted(theirs)
    assert ours[-1] == theirs[-1]  # TOTAL last


def test_detailed_json_adds_attempts_and_duration_to_every_row() -> None:
    data = report_to_json(build_run_report(retry_run_events()), detailed=True)
    steps = {row["stepPath"]: (row["attempts"], row["durationMs"]) for row in data["steps"]}
    assert steps == {
        HOSTILE_STEP: (1, 2000),
        "extract": (1, 2000),
        "publish": (1, None),
        "summarize": (2, 6000),
    }
    assert (data["unattributed"]["attempts"], data["unattributed"]["durationMs"]) == (0, None)
    assert (data["total"]["attempts"], data["total"]["durationMs"]) == (5, None)  # still running
    assert "timeline" not in data


@pytest.mark.parametrize("vector", RUN_REPORTS, ids=_ids(RUN_REPORTS))
def test_detailed_json_is_upstreams_plus_two_keys_per_row_in_run_order(
    vector: dict[str, Any],
) -> None:
    data = report_to_json(_upstream_report(vector["events"]), detailed=True)
    rows = [
        *data["steps"],
        data["total"],
        *([data["unattributed"]] if "unattributed" in data else []),
    ]
    for row in rows:
        assert isinstance(row.pop("attempts"), int)
        duration = row.pop("durationMs")
        assert duration is None or duration >= 0
    expected = vector["expected_report"]
    # Steps in run order (upstream's, sorted) and dollars rounded to 10 decimals.
    assert sorted(data.pop("steps"), key=str) == sorted(_rounded(expected["steps"]), key=str)
    data.pop("failure", None)
    assert data == _rounded({k: v for k, v in expected.items() if k != "steps"})


def _rounded(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: round(v, 10) if k == "costUsd" and isinstance(v, float) else _rounded(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


def test_finished_run_total_duration_is_its_wall_clock() -> None:
    vector = RUN_REPORTS[0]
    report = _upstream_report(vector["events"])
    events = vector["events"]
    at = {e["type"]: datetime.fromisoformat(e["recordedAt"]) for e in events}
    wall_clock = (at["RunCompleted"] - at["RunStarted"]).total_seconds() * 1000
    assert wall_clock > 0 and report.total.duration_ms == wall_clock
    assert report.total.attempts == sum(1 for e in events if e["type"] == "StepAttemptStarted")


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (None, "—"),
        (0, "0 ms"),
        (999.4, "999 ms"),
        (1000, "1.0 s"),
        (59_949, "59.9 s"),
        (59_950, "1m 00s"),
        (125_000, "2m 05s"),
        (3_600_000, "1h 00m"),
        (3_725_000, "1h 02m"),
    ],
)
def test_format_duration(ms: float | None, text: str) -> None:
    assert format_duration(ms) == text


def _gpt41_run() -> list[dict[str, Any]]:
    model = {"provider": "openai", "modelId": "gpt-4.1"}  # in litellm's map, not the registry
    usage = {"inputTokens": 1_000_000, "cachedInputTokens": 200_000, "outputTokens": 100_000}
    events: list[dict[str, Any]] = [
        {"type": "RunStarted", "payload": {"workflowVersionId": "wfver_1"}},
        {"type": "StepAttemptStarted", "payload": {"stepPath": "draft", "attemptId": "a1"}},
        _responded("draft", model, usage),
        {"type": "StepCompleted", "payload": {"stepPath": "draft"}},
        {"type": "RunCompleted", "payload": {}},
    ]
    return [
        {
            "eventId": f"evt_{i:016x}",
            "runId": "run_gpt41",
            "sequence": i,
            "recordedAt": f"2026-08-07T00:00:0{i}.000Z",
            **event,
        }
        for i, event in enumerate(events, start=1)
    ]


def test_report_prices_through_the_fallback_when_given_one() -> None:
    from little_dist.litellm_prices import litellm_price_fallback

    cost = (800_000 * 2.0 + 200_000 * 0.5 + 100_000 * 8.0) / 1_000_000
    unpriced = _upstream_report(_gpt41_run())
    assert unpriced.total.cost_usd is None and unpriced.has_unpriced_calls
    assert "n/a" in render_table(unpriced)

    priced = build_run_report(_gpt41_run(), pricing_fallback=litellm_price_fallback)
    assert priced.total.cost_usd == pytest.approx(cost)
    assert priced.steps[0].cost_usd == pytest.approx(cost)
    assert not priced.has_unpriced_calls
    assert priced.timeline[0].usage.cost_usd == pytest.approx(cost)  # per-attempt bars too
    assert "n/a" not in render_table(priced, detailed=True)


# --- timeline and HTML -------------------------------------------------------------------


def test_timeline_has_one_span_per_attempt_with_per_attempt_usage() -> None:
    report = build_run_report(retry_run_events())
    spans = [(s.step_path, s.attempt_number, s.status) for s in report.timeline]
    assert spans == [
        ("extract", 1, "completed"),
        ("summarize", 1, "failed"),
        ("summarize", 2, "completed"),
        (HOSTILE_STEP, 1, "completed"),
        ("publish", 1, "running"),
    ]
    first, second = report.timeline[1], report.timeline[2]
    assert first.usage.input_tokens == 1000 and second.usage.input_tokens == 3000
    assert first.duration_ms == 2000
    summarize = next(row for row in report.steps if row.step_path == "summarize")
    assert summarize.attempts == 2
    assert summarize.duration_ms == 6000
    assert summarize.input_tokens == 4000
    # Timeline data stays out of upstream's JSON unless asked for.
    assert "timeline" not in report_to_json(report)
    assert len(report_to_json(report, include_timeline=True)["timeline"]) == 5


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(page: str) -> _Collector:
    collector = _Collector()
    collector.feed(page)
    return collector


def test_html_has_one_bar_per_attempt_and_the_step_table() -> None:
    report = build_run_report(retry_run_events())
    page = render_html(report)
    parsed = _parse(page)
    bars = [attrs for tag, attrs in parsed.tags if tag == "g" and attrs.get("class") == "bar"]
    assert [(b["data-step"], b["data-status"]) for b in bars] == [
        ("extract", "completed"),
        ("summarize", "failed"),
        ("summarize", "completed"),
        (HOSTILE_STEP, "completed"),
        ("publish", "running"),
    ]
    assert sum(1 for tag, _ in parsed.tags if tag == "svg") == 1
    rows = [attrs for tag, attrs in parsed.tags if tag == "tr" and attrs.get("class")]
    assert [r["class"] for r in rows] == ["step"] * 4 + ["unattributed", "total"]
    text = "".join(parsed.text)
    assert "$0.007500" in text  # the failed summarize attempt's own dollars, in its title
    assert "1 model call(s) had no registry pricing" in text


def test_html_is_self_contained() -> None:
    page = render_html(build_run_report(retry_run_events()))
    assert "<script" not in page.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "@import" not in page and "url(" not in page


def test_html_escapes_hostile_step_names_and_run_ids() -> None:
    page = render_html(build_run_report(retry_run_events()))
    assert HOSTILE_STEP not in page
    assert "<img" not in page and "onerror=" not in page.replace("onerror=&quot;", "")
    parsed = _parse(page)
    assert not any(tag in {"img", "script", "iframe"} for tag, _ in parsed.tags)
    # The name survives as text, in the table and on the bar.
    assert HOSTILE_STEP in "".join(parsed.text)
    assert any(attrs.get("data-step") == HOSTILE_STEP for _, attrs in parsed.tags)


def test_html_for_a_run_without_attempts_still_renders() -> None:
    page = render_html(build_run_report(RUN_REPORTS[1]["events"]))
    assert "No step attempts were recorded" in page
    assert "(outside steps)" in page  # upstream's (unattributed) row, in words
