"""The report as one self-contained HTML page: summary, attempt timeline and step table.

No scripts, no external assets: inline CSS and an inline SVG chart, so the file can be
mailed, archived or opened from disk. Every piece of text from the log goes through
:func:`html.escape`; step names are user data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from html import escape
from typing import Any

from little_dist.canonical import js_number_string
from little_dist.pricing import Number, format_cost, format_share
from little_dist.report.model import AttemptSpan, RunReport, RunReportRow
from little_dist.report.table import OUTSIDE_STEPS, format_calls, format_duration

__all__ = [
    "REPORT_CSS",
    "STATUS_COLOURS",
    "render_html",
    "render_steps_table",
    "render_summary",
    "render_timeline",
]

STATUS_COLOURS = {
    "completed": "#2f9e62",
    "failed": "#d9483b",
    "running": "#3577d4",
    "pending": "#9aa3ad",
}
_OTHER_COLOUR = "#7a5cc9"

# Timeline geometry (SVG user units = CSS px at the default viewBox scale).
_WIDTH = 1100
_LABEL_W = 230
_PAD_R = 24
_AXIS_H = 34
_ROW_H = 30
_BAR_H = 18
_CHAR_W = 6.6  # rough width of a 11px sans-serif character, to place labels

REPORT_CSS = """
:root { color-scheme: light; --ink:#1d2430; --muted:#5f6b7a; --line:#e3e7ec; --bg:#f6f8fa; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",
  Arial,sans-serif; color:var(--ink); background:var(--bg); }
main { max-width:1160px; margin:0 auto; padding:28px 24px 48px; }
header h1 { margin:0 0 4px; font-size:22px; font-weight:650; word-break:break-all; }
header p { margin:0; color:var(--muted); }
.badge { display:inline-block; padding:1px 9px; border-radius:999px; color:#fff;
  font-size:12px; font-weight:600; vertical-align:middle; text-transform:uppercase;
  letter-spacing:.03em; }
.cards { display:grid; grid-template-columns:repeat(auto-fit,minmax(160px,1fr)); gap:12px;
  margin:22px 0 26px; }
.card { background:#fff; border:1px solid var(--line); border-radius:10px; padding:12px 14px; }
.card .k { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.04em; }
.card .v { font-size:21px; font-weight:650; margin-top:2px; font-variant-numeric:tabular-nums; }
.card .s { color:var(--muted); font-size:12px; }
section { background:#fff; border:1px solid var(--line); border-radius:10px; padding:16px 18px;
  margin-bottom:22px; overflow-x:auto; }
section h2 { font-size:15px; margin:0 0 10px; }
.legend { display:flex; gap:16px; flex-wrap:wrap; color:var(--muted); font-size:12px;
  margin:0 0 6px; }
.legend i { display:inline-block; width:11px; height:11px; border-radius:3px;
  margin-right:5px; vertical-align:-1px; }
svg text { font-family:inherit; }
table { border-collapse:collapse; width:100%; font-variant-numeric:tabular-nums; }
th, td { padding:7px 10px; border-bottom:1px solid var(--line); text-align:right;
  white-space:nowrap; }
th { font-size:12px; color:var(--muted); text-transform:uppercase; letter-spacing:.04em;
  font-weight:600; }
th:first-child, td:first-child { text-align:left; }
td.step { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; font-size:13px;
  white-space:normal; word-break:break-all; }
tr.unattributed td, tr.late td { color:var(--muted); font-style:italic; }
.failure { color:#8a1c1c; background:#fdeceb; border:1px solid #f1b8b4; border-radius:8px;
  padding:9px 12px; margin:0 0 22px; }
tr.total td { font-weight:650; border-top:2px solid var(--ink); border-bottom:none; }
.cost { display:flex; align-items:center; justify-content:flex-end; gap:8px; }
.meter { width:70px; height:6px; background:var(--line); border-radius:3px; overflow:hidden; }
.meter span { display:block; height:100%; background:#e0a526; }
.note { color:#8a5a00; background:#fff7e0; border:1px solid #f1dca4; border-radius:8px;
  padding:9px 12px; margin:0 0 22px; }
.empty { color:var(--muted); margin:4px 0; }
footer { color:var(--muted); font-size:12px; }
"""


def _colour(status: str) -> str:
    return STATUS_COLOURS.get(status, _OTHER_COLOUR)


def _badge(status: str) -> str:
    return f'<span class="badge" style="background:{_colour(status)}">{escape(status)}</span>'


def _tokens(value: Number) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return js_number_string(value)


def _dollars(cost: float | None) -> str:
    text = format_cost(cost)
    return text if cost is None else f"${text}"


def _time(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _ms_between(start: datetime, end: datetime) -> float | None:
    try:
        return (end - start).total_seconds() * 1000
    except TypeError:
        return None


# --- summary ---------------------------------------------------------------------------


def _card(key: str, value: str, sub: str = "") -> str:
    sub_html = f'<div class="s">{escape(sub)}</div>' if sub else ""
    return (
        f'<div class="card"><div class="k">{escape(key)}</div>'
        f'<div class="v">{escape(value)}</div>{sub_html}</div>'
    )


def _elapsed(report: RunReport) -> tuple[str, str]:
    """The duration card: wall-clock time, or time so far for an unfinished run."""
    if report.total.duration_ms is not None:
        return format_duration(report.total.duration_ms), "wall clock, start to finish"
    start = _time(report.started_at)
    last = _time(report.last_event_at)
    so_far = _ms_between(start, last) if start is not None and last is not None else None
    if so_far is None:
        return "—", "not started"
    return format_duration(so_far), "so far (run not finished)"


def _budget_card(budget: Mapping[str, float]) -> str:
    """The run's dollar budget: what is left of it, and what was spent and is held."""
    left = budget["budgetUsd"] - budget["spentUsd"] - budget["reservedUsd"]
    left -= budget.get("subRunsUsd", 0.0)
    sub = f"${budget['spentUsd']:.6f} spent · ${budget['reservedUsd']:.6f} held"
    if "subRunsUsd" in budget:
        sub += f" · ${budget['subRunsUsd']:.6f} sub-runs"
    return _card(f"Budget ${budget['budgetUsd']:.6f}", f"${max(left, 0.0):.6f} left", sub)


def render_summary(report: RunReport, budget: Mapping[str, float] | None = None) -> str:
    """The summary cards (cost, duration, steps, calls, tokens, cache hits, budget): the
    report page's and the live viewer's (:mod:`little_dist.http.viewer`)."""
    total = report.total
    failed_attempts = sum(1 for span in report.timeline if span.status == "failed")
    calls = total.priced_calls + total.unpriced_calls
    cost_sub = (
        f"{total.unpriced_calls} unpriced call(s) not included"
        if total.unpriced_calls
        else "all calls priced from the registry"
    )
    duration, duration_sub = _elapsed(report)
    cards = [
        _card("Total cost (USD)", _dollars(total.cost_usd), cost_sub),
        _card("Duration", duration, duration_sub),
        _card(
            "Steps",
            str(len(report.steps)),
            f"{len(report.timeline)} attempt(s), {failed_attempts} failed",
        ),
        _card("Model calls", str(calls), f"{total.priced_calls} priced"),
        _card(
            "Tokens",
            _tokens(total.input_tokens + total.output_tokens),
            f"{_tokens(total.input_tokens)} in ({_tokens(total.cached_input_tokens)} cached)"
            f" · {_tokens(total.output_tokens)} out",
        ),
        _card("Cache hits", format_share(total.cache_hit_share), "of input tokens"),
    ]
    if budget is not None:
        cards.append(_budget_card(budget))
    return f'<div class="cards">{"".join(cards)}</div>'


def _span_text(report: RunReport) -> str:
    if report.started_at is None:
        return "not started"
    if report.finished_at is None:
        return f"started {report.started_at}, not finished"
    return f"{report.started_at} → {report.finished_at}"


# --- timeline --------------------------------------------------------------------------


def _nice_step(span_ms: float, target_ticks: int = 7) -> float:
    raw = max(span_ms / target_ticks, 1.0)
    magnitude = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= factor * magnitude:
            return float(factor * magnitude)
    return float(10 * magnitude)


def _tick_label(ms: float, step: float) -> str:
    if ms == 0:
        return "0"
    if step < 1000:
        return f"{ms:.0f} ms"
    if step < 60_000 or ms < 60_000:
        return f"{ms / 1000:g} s"
    minutes, seconds = divmod(round(ms / 1000), 60)
    return f"{minutes}m{seconds:02d}s" if seconds else f"{minutes}m"


def _bar_label(span: AttemptSpan) -> str:
    usage = span.usage
    calls = usage.priced_calls + usage.unpriced_calls
    tokens = usage.input_tokens + usage.output_tokens
    parts = [format_duration(span.duration_ms)] if span.duration_ms is not None else [span.status]
    if calls:
        parts.append(f"{_tokens(tokens)} tok")
        parts.append(_dollars(usage.cost_usd))
    return " · ".join(parts)


def _bar_title(span: AttemptSpan) -> str:
    usage = span.usage
    lines = [
        f"{span.step_path} — attempt {span.attempt_number} ({span.attempt_id})",
        f"status: {span.status}",
        f"started: {span.started_at}",
        f"finished: {span.finished_at or '—'}",
        f"duration: {format_duration(span.duration_ms)}",
        f"tokens: in {_tokens(usage.input_tokens)} (cached {_tokens(usage.cached_input_tokens)})"
        f", out {_tokens(usage.output_tokens)}",
        f"cost (USD): {format_cost(usage.cost_usd)}"
        + (f" ({usage.unpriced_calls} unpriced call(s))" if usage.unpriced_calls else ""),
    ]
    return "\n".join(lines)


def render_timeline(report: RunReport) -> str:
    """The attempt timeline (an inline SVG, one bar per step attempt, and its legend): the
    report page's and the live viewer's, which draws it again as a run's events come."""
    spans = report.timeline
    if not spans:
        return '<p class="empty">No step attempts were recorded for this run.</p>'
    starts = [_time(span.started_at) for span in spans]
    known = [start for start in starts if start is not None]
    origin = _time(report.started_at) or (min(known) if known else None)
    if origin is None:
        return '<p class="empty">The attempts carry no readable timestamps.</p>'

    ends: list[datetime] = [
        t for t in (_time(report.finished_at), _time(report.last_event_at)) if t
    ]
    ends.extend(t for t in (_time(span.finished_at) for span in spans) if t is not None)
    ends.extend(known)
    horizon = max((_ms_between(origin, end) or 0.0) for end in ends) if ends else 0.0
    horizon = max(horizon, 1.0)
    step = _nice_step(horizon)
    axis_end = math.ceil(horizon / step) * step
    chart_w = _WIDTH - _LABEL_W - _PAD_R
    height = _AXIS_H + len(spans) * _ROW_H + 8

    def x_of(ms: float) -> float:
        return _LABEL_W + max(ms, 0.0) / axis_end * chart_w

    out = [
        f'<svg class="timeline" role="img" xmlns="http://www.w3.org/2000/svg" '
        f'width="100%" viewBox="0 0 {_WIDTH} {height}" preserveAspectRatio="xMinYMin meet">',
        f"<title>Timeline of {escape(report.run_id)}: one bar per step attempt</title>",
    ]
    tick = 0.0
    while tick <= axis_end + 1e-9:
        out.append(_tick_svg(x_of(tick), height, _tick_label(tick, step)))
        tick += step

    run_end = _time(report.last_event_at) or _time(report.finished_at)
    for row, span in enumerate(spans):
        y = _AXIS_H + row * _ROW_H
        start = starts[row]
        start_ms = _ms_between(origin, start) if start is not None else None
        end = _time(span.finished_at) or run_end
        end_ms = _ms_between(origin, end) if end is not None else None
        if start_ms is None:
            start_ms = 0.0
        if end_ms is None or end_ms < start_ms:
            end_ms = start_ms
        x0, x1 = x_of(start_ms), x_of(end_ms)
        width = max(x1 - x0, 4.0)
        colour = _colour(span.status)
        name = (
            span.step_path
            if span.attempt_number == 1
            else f"{span.step_path} #{span.attempt_number}"
        )
        shown = name if len(name) <= 32 else name[:31] + "…"
        label_svg = _bar_label_svg(_bar_label(span), x0, width, y)
        unfinished = span.finished_at is None
        dash = ' stroke-dasharray="4 3" fill-opacity="0.55"' if unfinished else ""
        if row % 2 == 0:
            out.append(f'<rect x="0" y="{y}" width="{_WIDTH}" height="{_ROW_H}" fill="#f8fafc"/>')
        out.append(
            f'<g class="bar" data-step="{escape(span.step_path)}" '
            f'data-attempt="{escape(span.attempt_id)}" data-status="{escape(span.status)}">'
            f"<title>{escape(_bar_title(span))}</title>"
            f'<text x="{_LABEL_W - 10}" y="{y + _ROW_H / 2 + 4:.1f}" font-size="12" '
            f'fill="#1d2430" text-anchor="end">{escape(shown)}</text>'
            f'<rect x="{x0:.1f}" y="{y + (_ROW_H - _BAR_H) / 2:.1f}" width="{width:.1f}" '
            f'height="{_BAR_H}" rx="4" fill="{colour}" stroke="{colour}"{dash}/>'
            f"{label_svg}</g>"
        )
    out.append("</svg>")
    legend = "".join(
        f'<span><i style="background:{colour}"></i>{escape(status)}</span>'
        for status, colour in STATUS_COLOURS.items()
    )
    return f'<div class="legend">{legend}</div>' + "".join(out)


def _tick_svg(x: float, height: int, label: str) -> str:
    """One tick of the timeline's time axis: a grid line and its label."""
    return (
        f'<line x1="{x:.1f}" y1="{_AXIS_H - 6}" x2="{x:.1f}" y2="{height - 4}" '
        'stroke="#e3e7ec" stroke-width="1"/>'
        f'<text x="{x:.1f}" y="{_AXIS_H - 12}" font-size="11" fill="#5f6b7a" '
        f'text-anchor="middle">{escape(label)}</text>'
    )


def _bar_label_svg(label: str, x0: float, width: float, y: float) -> str:
    """A bar's label: inside the bar when it fits, else after it, else before it."""
    label_w = len(label) * _CHAR_W
    baseline = f"{y + _ROW_H / 2 + 4:.1f}"
    if width >= label_w + 12:
        return (
            f'<text x="{x0 + 6:.1f}" y="{baseline}" font-size="11" '
            f'fill="#fff" font-weight="600">{escape(label)}</text>'
        )
    if x0 + width + 6 + label_w <= _WIDTH:
        return (
            f'<text x="{x0 + width + 6:.1f}" y="{baseline}" font-size="11" '
            f'fill="#1d2430">{escape(label)}</text>'
        )
    return (
        f'<text x="{x0 - 6:.1f}" y="{baseline}" font-size="11" '
        f'fill="#1d2430" text-anchor="end">{escape(label)}</text>'
    )


# --- step table ------------------------------------------------------------------------


def _table_row(row: RunReportRow, css: str, max_cost: float, label: str | None = None) -> str:
    share = 0.0 if not row.cost_usd or max_cost <= 0 else min(row.cost_usd / max_cost, 1.0)
    meter = (
        f'<span class="meter"><span style="width:{share * 100:.1f}%"></span></span>'
        if css == "step"
        else ""
    )
    status = _badge(row.status) if css == "step" else escape(row.status)
    attempts = str(row.attempts) if css == "step" else ""
    return (
        f'<tr class="{css}"><td class="step">{escape(label or row.step_path)}</td>'
        f"<td>{status}</td><td>{attempts}</td><td>{format_duration(row.duration_ms)}</td>"
        f"<td>{_tokens(row.input_tokens)}</td><td>{_tokens(row.cached_input_tokens)}</td>"
        f"<td>{format_share(row.cache_hit_share)}</td><td>{_tokens(row.output_tokens)}</td>"
        f"<td>{escape(format_calls(row, words=True))}</td>"
        f'<td><span class="cost">{meter}{escape(format_cost(row.cost_usd))}</span></td></tr>'
    )


def render_steps_table(report: RunReport) -> str:
    """One row per step (attempts, duration, tokens, calls, dollars) and the totals."""
    max_cost = max((row.cost_usd or 0.0 for row in report.steps), default=0.0)
    head = "".join(
        f"<th>{label}</th>"
        for label in (
            "Step",
            "Status",
            "Attempts",
            "Duration",
            "In",
            "Cached",
            "Cache %",
            "Out",
            "Calls",
            "Cost (USD)",
        )
    )
    body = [_table_row(row, "step", max_cost) for row in report.steps]  # (in run order)
    if report.unattributed is not None:
        body.append(_table_row(report.unattributed, "unattributed", max_cost, OUTSIDE_STEPS))
    if report.late is not None:
        body.append(_table_row(report.late, "late", max_cost))
    body.append(_table_row(report.total, "total", max_cost))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def render_waiting(waiting: Sequence[Mapping[str, Any]]) -> str:
    """The tool calls a run waits for a person's decision on (``little report --json``'s
    ``waiting``): which call, since when, its deadline, and the commands that answer it."""
    if not waiting:
        return ""
    items = "".join(
        f'<li data-approval-id="{escape(str(wait.get("approvalId", "")))}">step '
        f"<b>{escape(str(wait.get('stepPath', '')))}</b> calls "
        f"<b>{escape(str(wait.get('toolName', '')))}</b>, waiting since "
        f"{escape(str(wait.get('since', '')))}; "
        + (
            f"deadline {escape(str(wait['deadline']))} (then {escape(str(wait.get('onTimeout')))})"
            if wait.get("deadline")
            else "no deadline"
        )
        + "<br>answer: <code>"
        + escape(str((wait.get("answer") or {}).get("approve", "")))
        + "</code> or <code>"
        + escape(str((wait.get("answer") or {}).get("reject", "")))
        + "</code></li>"
        for wait in waiting
    )
    return f'<section class="waiting"><h2>Waiting for approval</h2><ul>{items}</ul></section>'


def render_html(
    report: RunReport,
    budget: Mapping[str, float] | None = None,
    waiting: Sequence[Mapping[str, Any]] = (),
) -> str:
    """A complete HTML document for the report (a string; writing it is the caller's job);
    ``budget``: the run's dollar budget, spent and held (``little report --json``'s
    ``budget``), shown as a card; ``waiting``: the tool calls the run waits for a person's
    decision on (its ``waiting``), shown with the commands that answer them."""
    note = render_waiting(waiting)
    if report.failure is not None:
        note += f'<p class="failure">Cause: {escape(report.failure.line())}</p>'
    if report.has_unpriced_calls:
        note += (
            f'<p class="note">{report.total.unpriced_calls} model call(s) had no registry '
            "pricing and are excluded from the cost above. Their tokens are counted.</p>"
        )
    if report.unattributed is not None:
        note += (
            f'<p class="note">{OUTSIDE_STEPS} counts model calls recorded without a step '
            "(a planner's, for one).</p>"
        )
    if report.late is not None:
        note += (
            f'<p class="note">{escape(report.late.step_path)} counts model calls that '
            "finished after the run had ended: the run's log refused them, but they were "
            "paid for, so the total counts them.</p>"
        )
    run_id = escape(report.run_id)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Run {run_id} — report</title><style>{REPORT_CSS}</style></head><body><main>"
        f"<header><h1>Run {run_id} {_badge(report.status)}</h1>"
        f"<p>{escape(_span_text(report))}</p></header>"
        f"{render_summary(report, budget)}{note}"
        f"<section><h2>Timeline</h2>{render_timeline(report)}</section>"
        f"<section><h2>Steps</h2>{render_steps_table(report)}</section>"
        "<footer>Costs come from registry rates only; a payload's own cost figure is never "
        "read. Hover a bar for its attempt's details.</footer>"
        "</main></body></html>\n"
    )
