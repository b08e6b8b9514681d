"""The report as a fixed-width terminal table.

:func:`render_table` draws upstream's ``formatRunReport`` table character for character
(the conformance vectors pin it). ``render_table(report, detailed=True)`` is ours: an
ATTEMPTS and a DURATION column after STEP, the steps in run order, words where upstream has
signs (``3 (1 unpriced)`` for ``2+1?``, ``(outside steps)`` for ``(unattributed)``, each
explained under the table), and, for a failed run, a ``Cause:`` line. ``little report``
prints the detailed one and keeps upstream's behind ``--upstream``.
"""

from __future__ import annotations

from little_dist.canonical import js_number_string
from little_dist.pricing import format_cost, format_share
from little_dist.report.model import RunReport, RunReportRow, upstream_rows

__all__ = ["OUTSIDE_STEPS", "format_calls", "format_duration", "render_table"]

_HEADER = ("STEP", "IN", "CACHED", "CACHE%", "OUT", "CALLS", "COST (USD)")
_DETAILED_HEADER = ("STEP", "ATTEMPTS", "DURATION", *_HEADER[1:])
_NOT_APPLICABLE = "—"
#: The detailed table's name for upstream's ``(unattributed)`` row.
OUTSIDE_STEPS = "(outside steps)"


def format_duration(ms: float | None) -> str:
    """``350 ms``, ``12.4 s``, ``4m 05s``, ``1h 02m``; ``—`` when unknown."""
    if ms is None:
        return _NOT_APPLICABLE
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 59_950:  # below this, one decimal of seconds never rounds up to "60.0 s"
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(round(ms / 1000), 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def format_calls(row: RunReportRow, *, words: bool = False) -> str:
    """``3`` when every call was priced; when one of three had no pricing, ``2+1?``
    (upstream's) or, with ``words``, ``3 (1 unpriced)``."""
    if row.unpriced_calls == 0:
        return js_number_string(row.priced_calls)
    if words:
        calls = js_number_string(row.priced_calls + row.unpriced_calls)
        return f"{calls} ({js_number_string(row.unpriced_calls)} unpriced)"
    return f"{row.priced_calls}+{row.unpriced_calls}?"


def _cells(
    row: RunReportRow, *, detailed: bool, attempts: bool = True, label: str | None = None
) -> tuple[str, ...]:
    extra = (
        (js_number_string(row.attempts) if attempts else _NOT_APPLICABLE),
        format_duration(row.duration_ms),
    )
    return (
        row.step_path if label is None else label,
        *(extra if detailed else ()),
        js_number_string(row.input_tokens),
        js_number_string(row.cached_input_tokens),
        format_share(row.cache_hit_share),
        js_number_string(row.output_tokens),
        format_calls(row, words=detailed),
        format_cost(row.cost_usd),
    )


def _width(text: str) -> int:
    # JS String#length and padEnd count UTF-16 code units, not code points.
    return len(text.encode("utf-16-le")) // 2


def render_table(report: RunReport, *, detailed: bool = False) -> str:
    """Render the report as a fixed-width table (ends with a newline).

    By default exactly upstream's ``formatRunReport`` (plus, for a run with a late record,
    its ``(after the run ended)`` row). ``detailed=True`` adds ATTEMPTS (per step; the TOTAL
    row sums them; ``—`` for calls outside any step) and DURATION (first attempt's start to
    last attempt's end; the run's wall clock on TOTAL; ``—`` while unfinished), and the rest
    described in the module docstring.
    """
    header = _DETAILED_HEADER if detailed else _HEADER
    rows = report.steps if detailed else upstream_rows(report)
    body = [_cells(row, detailed=detailed) for row in rows]
    if report.unattributed is not None:
        label = OUTSIDE_STEPS if detailed else None
        body.append(_cells(report.unattributed, detailed=detailed, attempts=False, label=label))
    if report.late is not None:
        body.append(_cells(report.late, detailed=detailed, attempts=False))
    body.append(_cells(report.total, detailed=detailed))
    widths = [
        max(_width(label), *(_width(line[column]) for line in body))
        for column, label in enumerate(header)
    ]

    def line(cells: tuple[str, ...]) -> str:
        padded = [
            # Step names left-aligned, numbers right-aligned.
            cell + " " * (widths[i] - _width(cell))
            if i == 0
            else " " * (widths[i] - _width(cell)) + cell
            for i, cell in enumerate(cells)
        ]
        return "  ".join(padded).rstrip()

    rule = "  ".join("-" * width for width in widths)
    out = [f"Run {report.run_id} ({report.status})"]
    if detailed and report.failure is not None:
        out.append(f"Cause: {report.failure.line()}")
    out += ["", line(header), rule]
    out.extend(line(cells) for cells in body[:-1])
    if len(body) > 1:
        out.append(rule)
    out.append(line(body[-1]))
    if detailed:
        out += _notes(report)
    elif report.has_unpriced_calls:
        out.extend(
            [
                "",
                f"Note: {js_number_string(report.total.unpriced_calls)} model call(s) had no "
                "registry pricing and are excluded from the cost above.",
            ]
        )
    out.append("")
    return "\n".join(out)


def _notes(report: RunReport) -> list[str]:
    """What the detailed table's words mean, for the rows and figures it shows."""
    notes: list[str] = []
    if report.unattributed is not None:
        notes.append(
            f"{OUTSIDE_STEPS} counts model calls recorded without a step (a planner's, for one)."
        )
    if report.late is not None:
        notes.append(
            f"{report.late.step_path} counts model calls that finished after the run had "
            "ended: the run's log refused them, but they were paid for, so TOTAL counts them."
        )
    if report.has_unpriced_calls:
        notes.append(
            f"{js_number_string(report.total.unpriced_calls)} model call(s) have no price in "
            "the model registry (unpriced): their tokens are counted, their cost is not."
        )
    return ["", *(f"Note: {note}" for note in notes)] if notes else []
