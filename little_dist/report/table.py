"""The report as a fixed-width terminal table, character for character as upstream's."""

from __future__ import annotations

from little_dist.canonical import js_number_string
from little_dist.pricing import format_cost, format_share
from little_dist.report.model import RunReport, RunReportRow

__all__ = ["format_calls", "render_table"]

_HEADER = ("STEP", "IN", "CACHED", "CACHE%", "OUT", "CALLS", "COST (USD)")


def format_calls(row: RunReportRow) -> str:
    """``3`` when every call was priced, ``2+1?`` when one of three had no pricing."""
    if row.unpriced_calls == 0:
        return js_number_string(row.priced_calls)
    return f"{row.priced_calls}+{row.unpriced_calls}?"


def _cells(row: RunReportRow) -> tuple[str, ...]:
    return (
        row.step_path,
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


def render_table(report: RunReport) -> str:
    """Render the report as upstream's ``formatRunReport`` does (ends with a newline)."""
    rows = [*report.steps, *([] if report.unattributed is None else [report.unattributed])]
    body = [_cells(row) for row in [*rows, report.total]]
    widths = [
        max(_width(label), *(_width(line[column]) for line in body))
        for column, label in enumerate(_HEADER)
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
    out = [f"Run {report.run_id} ({report.status})", "", line(_HEADER), rule]
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
