"""The report as a fixed-width terminal table.

:func:`render_table` draws upstream's ``formatRunReport`` table character for character
(the conformance vectors pin it). ``render_table(report, detailed=True)`` is ours: the same
table with an ATTEMPTS and a DURATION column after STEP. ``little report`` prints the
detailed one and keeps upstream's behind ``--upstream``.
"""

from __future__ import annotations

from little_dist.canonical import js_number_string
from little_dist.pricing import format_cost, format_share
from little_dist.report.model import RunReport, RunReportRow

__all__ = ["format_calls", "format_duration", "render_table"]

_HEADER = ("STEP", "IN", "CACHED", "CACHE%", "OUT", "CALLS", "COST (USD)")
_DETAILED_HEADER = ("STEP", "ATTEMPTS", "DURATION", *_HEADER[1:])
_NOT_APPLICABLE = "—"


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


def format_calls(row: RunReportRow) -> str:
    """``3`` when every call was priced, ``2+1?`` when one of three had no pricing."""
    if row.unpriced_calls == 0:
        return js_number_string(row.priced_calls)
    return f"{row.priced_calls}+{row.unpriced_calls}?"


def _cells(row: RunReportRow, *, detailed: bool, attempts: bool = True) -> tuple[str, ...]:
    extra = (
        (js_number_string(row.attempts) if attempts else _NOT_APPLICABLE),
        format_duration(row.duration_ms),
    )
    return (
        row.step_path,
        *(extra if detailed else ()),
        js_number_string(row.input_tokens),
        js_number_string(row.cached_input_tokens),
        format_share(row.cache_hit_share),
        js_number_string(row.output_tokens),
        format_calls(row),
        format_cost(row.cost_usd),
    )


def _width(text: str) -> int:
    # JS String#length and padEnd count UTF-16 code units, not code points.
    return len(text.encode("utf-16-le")) // 2


def render_table(report: RunReport, *, detailed: bool = False) -> str:
    """Render the report as a fixed-width table (ends with a newline).

    By default exactly upstream's ``formatRunReport``. ``detailed=True`` adds ATTEMPTS
    (per step; the TOTAL row sums them; ``—`` for calls outside any step) and DURATION
    (first attempt's start to last attempt's end; the run's wall clock on TOTAL; ``—``
    while unfinished).
    """
    header = _DETAILED_HEADER if detailed else _HEADER
    body = [_cells(row, detailed=detailed) for row in report.steps]
    if report.unattributed is not None:
        body.append(_cells(report.unattributed, detailed=detailed, attempts=False))
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
    out = [f"Run {report.run_id} ({report.status})", "", line(header), rule]
    out.extend(line(cells) for cells in body[:-1])
    if len(body) > 1:
        out.append(rule)
    out.append(line(body[-1]))
    if report.has_unpriced_calls:
        out.extend(
            [
                "",
                f"Note: {js_number_string(report.total.unpriced_calls)} model call(s) had no "
                "registry pricing and are excluded from the cost above.",
            ]
        )
    out.append("")
    return "\n".join(out)
