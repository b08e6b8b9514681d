"""The viewer's HTML: page shells and the fragments the browser fetches into them (pure).

A page (:func:`shell`) holds no run data: the browser has no token when it asks for it (a
navigation cannot send an ``Authorization`` header), so the page's script fetches its
content, a fragment (:func:`runs_fragment`, :func:`run_fragment`), with the bearer token it
keeps in ``sessionStorage``. Fragments are rendered here, on the server, and every value from
a log goes through :func:`html.escape`: run input and output, step names, error messages,
tool names are whatever a workflow (or whoever submitted it) wrote. The run page's timeline,
summary and step table are the HTML report's own (:mod:`little_dist.report.html`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

from little_dist.pricing import format_cost
from little_dist.report import STATUS_COLOURS, RunReport
from little_dist.report.html import render_steps_table, render_summary, render_timeline
from little_dist.report.runs import STATUSES, RunSummary
from little_dist.report.table import format_duration
from little_dist.subruns.links import SubRunStart

from .calls import AttemptCalls, StepCalls

__all__ = ["RunPage", "run_fragment", "runs_fragment", "shell"]

#: Where the viewer lives (``/ui``: its pages; ``/ui/fragments``: their content;
#: ``/ui/static``: its script and style sheet).
BASE = "/ui"
_OTHER_COLOUR = "#7a5cc9"
#: Longest output shown inline; the rest is cut (``GET /v1/runs/{id}`` has it whole).
MAX_OUTPUT_CHARS = 20_000


def _colour(status: str) -> str:
    if status == "cancelled":
        return "#8d6e63"
    return STATUS_COLOURS.get(status, _OTHER_COLOUR)


def badge(status: str) -> str:
    return f'<span class="badge" style="background:{_colour(status)}">{escape(status)}</span>'


def run_url(run_id: str) -> str:
    return f"{BASE}/runs/{quote(run_id, safe='')}"


def _dollars(cost: float | None) -> str:
    return "—" if cost is None else f"${format_cost(cost)}"


def _count(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,.1f}"


def shell(*, title: str, page: str, fragment: str, body: str = "", run_id: str = "") -> str:
    """A page of the viewer: its header (the token form), ``body`` (a filter form) and an
    empty ``#content`` the script fills from ``fragment`` (a same-origin path)."""
    run_attr = f' data-run-id="{escape(run_id)}"' if run_id else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{escape(title)} — little</title>"
        f'<link rel="stylesheet" href="{BASE}/static/viewer.css">'
        f'<script src="{BASE}/static/viewer.js" defer></script></head>'
        f'<body data-page="{escape(page)}"{run_attr}><main>'
        f'<nav class="top"><a href="{BASE}">Runs</a>'
        '<form id="token-form" hidden autocomplete="off">'
        '<label>API token <input id="token-input" type="password" required '
        'placeholder="ldt_..." spellcheck="false"></label>'
        '<button type="submit">Use token</button></form>'
        '<button id="forget-token" type="button" hidden>Forget token</button></nav>'
        '<p id="message" class="note" role="status" hidden></p>'
        f"{body}"
        f'<div id="content" data-fragment="{escape(fragment)}"></div>'
        "</main></body></html>\n"
    )


def runs_filter(status: str | None, workflow: str | None) -> str:
    """The runs list's filter: a plain GET form (the page reloads with the query)."""
    options = "".join(
        f'<option value="{value}"{" selected" if value == (status or "") else ""}>{label}</option>'
        for value, label in [("", "any status"), *((s, s) for s in STATUSES)]
    )
    return (
        f'<form class="filter" method="get" action="{BASE}">'
        f'<label>Status <select name="status">{options}</select></label>'
        '<label>Workflow <input name="workflow" maxlength="200" placeholder="a glob: support.*" '
        f'value="{escape(workflow or "")}"></label>'
        '<button type="submit">Filter</button></form>'
    )


def fragment_query(**params: str | None) -> str:
    kept = {key: value for key, value in params.items() if value}
    return f"?{urlencode(kept)}" if kept else ""


def runs_fragment(runs: Sequence[RunSummary], *, next_query: str | None, filtered: bool) -> str:
    """The runs table: id (a link to its page), workflow, status, start, duration, cost."""
    if not runs:
        empty = "No runs match the filter." if filtered else "No runs yet."
        return f'<section><p class="empty">{empty}</p></section>'
    rows = "".join(
        f'<tr data-run-id="{escape(run.run_id)}">'
        f'<td class="step"><a href="{escape(run_url(run.run_id))}">{escape(run.run_id)}</a></td>'
        f"<td>{escape(run.workflow or '—')}</td><td>{badge(run.status)}</td>"
        f"<td>{escape(run.started_at)}</td><td>{format_duration(run.duration_ms)}</td>"
        f"<td>{_dollars(run.cost_usd)}</td></tr>"
        for run in runs
    )
    more = (
        f'<p><a class="next" href="{escape(BASE + next_query)}">Older runs →</a></p>'
        if next_query is not None
        else ""
    )
    head = "".join(
        f"<th>{label}</th>"
        for label in ("Run", "Workflow", "Status", "Started", "Duration", "Cost")
    )
    return (
        f'<section><h2>Runs</h2><table class="runs"><thead><tr>{head}</tr></thead>'
        f"<tbody>{rows}</tbody></table>{more}</section>"
    )


@dataclass(frozen=True)
class RunPage:
    """What the run page shows, read by the route (see :func:`run_fragment`)."""

    report: RunReport
    status: Mapping[str, Any]
    """``GET /v1/runs/{id}``'s body (``little status --json``)."""
    workflow: str | None
    last_sequence: int
    last_type: str
    calls: Mapping[str, StepCalls]
    children: Sequence[SubRunStart]
    child_ends: Mapping[str, Mapping[str, Any]]
    parent: Mapping[str, str] | None
    budget: Mapping[str, float] | None
    may_cancel: bool
    waiting: Sequence[Mapping[str, Any]] = ()
    """The tool calls waiting for a person (``GET /v1/runs/{id}``'s ``waiting``)."""
    may_decide: bool = False
    """The token holds ``approvals:decide``: the approvals get Approve / Reject buttons."""


def _word(status: Mapping[str, Any]) -> str:
    failure = status.get("failure")
    if isinstance(failure, Mapping) and failure.get("causeCode") == "cancelled":
        return "cancelled"
    return str(status.get("status", "unknown"))


def _parent_link(page: RunPage) -> str:
    if page.parent is None:
        return ""
    parent = page.parent.get("parentRunId", "")
    step = page.parent.get("parentStepPath")
    where = f" (its step {escape(step)})" if step else ""
    return (
        f'<p class="links">Sub-run of <a class="parent" href="{escape(run_url(parent))}">'
        f"{escape(parent)}</a>{where}</p>"
    )


def _children_table(page: RunPage) -> str:
    if not page.children:
        return ""
    rows = []
    for child in page.children:
        end = page.child_ends.get(child.child_run_id)
        state = str(end.get("status", "ended")) if end is not None else "running"
        link = escape(run_url(child.child_run_id))
        rows.append(
            f'<tr><td class="step"><a class="child" href="{link}">'
            f"{escape(child.child_run_id)}</a></td><td>{escape(child.workflow_id)}</td>"
            f"<td>{badge(state)}</td><td>{escape(child.step_path)}</td>"
            f"<td>{escape(child.tool_name)}</td></tr>"
        )
    return (
        "<section><h2>Sub-runs</h2><table><thead><tr><th>Run</th><th>Workflow</th>"
        "<th>Status</th><th>Started by step</th><th>Tool</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></section>"
    )


def _attempt(attempt: AttemptCalls) -> str:
    models = "".join(
        f"<li>model {escape(call.model)}"
        + (f" turn {call.turn}" if call.turn is not None else "")
        + f": {_count(call.input_tokens)} in ({_count(call.cached_input_tokens)} cached), "
        f"{_count(call.output_tokens)} out, {_dollars(call.cost_usd)}"
        + ("" if call.ok else " <em>(failed)</em>")
        + "</li>"
        for call in attempt.models
    )
    tools = "".join(
        f'<li>tool {escape(call.tool)}: <span class="tool-{escape(call.status)}">'
        f"{escape(call.status)}</span>"
        + (f", {format_duration(call.duration_ms)}" if call.duration_ms is not None else "")
        + "</li>"
        for call in attempt.tools
    )
    calls = models + tools
    body = f"<ul>{calls}</ul>" if calls else '<p class="empty">no model or tool calls</p>'
    cost = sum(call.cost_usd or 0.0 for call in attempt.models)
    tokens = sum(call.input_tokens + call.output_tokens for call in attempt.models)
    return (
        f'<div class="attempt" data-status="{escape(attempt.status)}">'
        f"<h4>attempt {attempt.number} {badge(attempt.status)} "
        f'<span class="muted">{escape(attempt.attempt_id or "")} · {len(attempt.models)} model '
        f"call(s), {len(attempt.tools)} tool call(s), {_count(tokens)} tokens, "
        f"{_dollars(cost if attempt.models else None)}</span></h4>{body}</div>"
    )


def _calls(calls: Mapping[str, StepCalls]) -> str:
    if not calls:
        return ""
    steps = "".join(
        f'<details class="step-calls" data-step="{escape(step.step_path)}"'
        f"{' open' if len(calls) <= 8 else ''}><summary>{escape(step.step_path)} "
        f'<span class="muted">{len(step.attempts)} attempt(s)</span></summary>'
        f"{''.join(_attempt(attempt) for attempt in step.attempts)}</details>"
        for step in calls.values()
    )
    return f"<section><h2>Attempts and calls</h2>{steps}</section>"


def _output(status: Mapping[str, Any]) -> str:
    if "output" not in status:
        return ""
    text = json.dumps(status["output"], indent=2, ensure_ascii=False)
    if len(text) > MAX_OUTPUT_CHARS:
        text = text[:MAX_OUTPUT_CHARS] + "\n… (cut: GET /v1/runs/{id} has it whole)"
    return f'<section><h2>Output</h2><pre class="output">{escape(text)}</pre></section>'


def _approvals(page: RunPage) -> str:
    """The run's pending approvals: the held call (step, tool, arguments), its rule and
    deadline; with ``approvals:decide``, a reason field and Approve / Reject buttons (the
    script posts ``POST /v1/approvals/{id}``)."""
    if not page.waiting:
        return ""
    items = []
    for wait in page.waiting:
        ident = escape(str(wait.get("approvalId", "")))
        args = json.dumps(wait.get("args"), indent=2, ensure_ascii=False)
        rule = json.dumps(wait.get("rule"), ensure_ascii=False)
        deadline = (
            f"deadline {escape(str(wait['deadline']))} (then {escape(str(wait.get('onTimeout')))})"
            if wait.get("deadline")
            else "no deadline"
        )
        buttons = (
            f'<div class="decide"><input class="approval-reason" maxlength="2000" '
            f'placeholder="reason (recorded)" aria-label="reason">'
            f'<button type="button" class="approve" data-approval-id="{ident}" '
            f'data-decision="approve">Approve</button>'
            f'<button type="button" class="reject" data-approval-id="{ident}" '
            f'data-decision="reject">Reject</button></div>'
            if page.may_decide
            else ""
        )
        items.append(
            f'<div class="approval" data-approval-id="{ident}">'
            f"<p>step <b>{escape(str(wait.get('stepPath', '')))}</b> calls tool "
            f'<b class="tool">{escape(str(wait.get("toolName", "")))}</b> · waiting since '
            f"{escape(str(wait.get('since', '')))} · {deadline}</p>"
            f'<pre class="args">{escape(args)}</pre>'
            f'<p class="muted">rule <code class="rule">{escape(rule)}</code> · '
            f"<code>{ident}</code></p>{buttons}</div>"
        )
    return f'<section class="approvals"><h2>Waiting for approval</h2>{"".join(items)}</section>'


def run_fragment(page: RunPage) -> str:
    """The run page's content; its root carries ``data-last-sequence`` (where the script's
    event stream resumes) and ``data-ended``."""
    report, status = page.report, page.status
    word = _word(status)
    ended = status.get("status") in ("completed", "failed")
    run_id = escape(report.run_id)
    failure = status.get("failure")
    why = ""
    if isinstance(failure, Mapping):
        cause = failure.get("causeCode") or "failed"
        step = failure.get("stepPath")
        head = f"{cause} in step {step}" if step else str(cause)
        message = failure.get("message") or ""
        why = f'<p class="failure">Why it failed: {escape(head)}: {escape(str(message))}</p>'
    cancel = ""
    if page.may_cancel and not ended:
        if status.get("cancelRequested"):
            cancel = '<span class="muted">cancel requested</span>'
        else:
            cancel = (
                f'<button id="cancel-run" type="button" data-run-id="{run_id}">Cancel run</button>'
            )
    started, finished = status.get("startedAt"), status.get("finishedAt")
    span = "not started" if not started else f"started {started}"
    if started and finished:
        span = f"{started} → {finished}"
    return (
        f'<div class="run" data-run-id="{run_id}" data-last-sequence="{page.last_sequence}" '
        f'data-ended="{1 if ended else 0}" data-status="{escape(word)}">'
        f"<header><h1>Run {run_id} {badge(word)}</h1>"
        f"<p>{escape(page.workflow or 'workflow unknown')} · {escape(str(span))}</p></header>"
        f'<div class="actions">{cancel}<span id="live" class="muted">'
        f"last event #{page.last_sequence} {escape(page.last_type)}</span></div>"
        f"{why}{_approvals(page)}{_parent_link(page)}{render_summary(report, page.budget)}"
        f"<section><h2>Timeline</h2>{render_timeline(report)}</section>"
        f"<section><h2>Steps</h2>{render_steps_table(report)}</section>"
        f"{_calls(page.calls)}{_children_table(page)}{_output(status)}</div>"
    )
