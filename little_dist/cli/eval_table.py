"""``little eval run``'s table: one row per case (its cost: its runs and its judge calls), the
summary with its cost and the judge's part of it, and what changed since the last run of the
same set."""

from __future__ import annotations

from typing import Any

__all__ = ["render"]


def render(document: dict[str, Any]) -> str:
    rows = [("ITEM", "TARGET", "ROLE", "RUNS", "STATUS", "COST (USD)", "DETAIL")]
    for case in document["cases"]:
        samples = case["samples"]
        passed = sum(s["status"] == "passed" for s in samples)
        rows.append(
            (
                case["itemSha"].removeprefix("sha256:")[:12],
                case["target"],
                case["role"],
                f"{passed}/{len(samples)}",
                case["status"],
                _dollars(case["costUsd"]),
                _detail(case),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
        + "  "
        + row[-1]
        for row in rows
    ]
    summary = document["summary"]
    lines.append("")
    lines.append(
        f"{document['evalSetId']}: {summary['passed']}/{summary['cases']} passed, "
        f"{summary['failed']} failed, {summary['errored']} errored"
        + (f", {summary['reused']} reused" if summary.get("reused") else "")
        + "; "
        f"cost {_dollars(summary['costUsd'])} USD"
        + (
            f" (judge {_dollars(summary['judgeCostUsd'])} USD, {len(document['events'])} calls)"
            if document.get("events")
            else ""
        )
    )
    previous = document.get("previous")
    if previous is not None:
        before = previous["summary"] or {}
        lines.append(
            f"last run {previous['ranAt']}: {before.get('passed')}/{before.get('cases')} passed"
            + (", changed: " if previous["changed"] else ", no case changed")
            + ", ".join(
                f"{c['itemSha'].removeprefix('sha256:')[:12]} {c['was']} -> {c['now']}"
                for c in previous["changed"]
            )
        )
    return "\n".join(line.rstrip() for line in lines)


def _detail(case: dict[str, Any]) -> str:
    if case.get("reused"):
        return "reused: its input cone is as in the last run"
    for sample in case["samples"]:
        if sample["status"] == "error":
            return str(sample.get("error"))[:120]
        if sample["status"] == "failed":
            wrong = [
                v["criterionId"] for v in sample.get("rubric", []) if v["verdict"] != v["expected"]
            ]
            if wrong and sample.get("output") == case["expected"]:
                return f"the judge disagrees on {', '.join(wrong)}"
            return "output differs from the label"
    return "rubric unscored" if case.get("rubric") == "unscored" else ""


def _dollars(value: float | None) -> str:
    if value is None:
        return "n/a"
    if 0 < value < 0.000001:
        return "<0.000001"
    return f"{value:.6f}"
