"""Run reports: tokens, cache hits, dollars and timing per step, as a table, JSON or HTML.

Entry points::

    report = build_run_report(events)      # events: dicts or Event models, one run, in order
    render_table(report) -> str            # upstream's fixed-width table
    report_to_json(report) -> dict         # upstream's JSON shape
    render_html(report) -> str             # a self-contained page with a timeline chart

All pure: no clock, no IO. Writing the HTML to a file is the caller's job.
"""

from __future__ import annotations

from little_dist.report.html import STATUS_COLOURS, render_html
from little_dist.report.model import (
    AttemptSpan,
    RunReport,
    RunReportRow,
    build_run_report,
    report_to_json,
    run_report,
)
from little_dist.report.table import render_table

__all__ = [
    "STATUS_COLOURS",
    "AttemptSpan",
    "RunReport",
    "RunReportRow",
    "build_run_report",
    "render_html",
    "render_table",
    "report_to_json",
    "run_report",
]
