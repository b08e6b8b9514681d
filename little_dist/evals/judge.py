"""Rubric criteria judged by a model (the card's ``judge``): for each criterion an item's
rubric lists, the judge is asked whether the output meets it, and its yes/no must be the
item's ``expected``.

Upstream defines the rubric (``{criterionId, expected}`` in the body, the criterion's text in
the construct) and pins the judge model in the card, but no judging loop; this one asks one
question per criterion, answered ``yes`` or ``no``, and counts any other answer as the
judge's error rather than guessing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Judge", "JudgeError", "judge_prompt", "judge_rubric", "parse_verdict"]

#: A judge: the question in, the model's answer text out.
Judge = Callable[[str], str]


class JudgeError(Exception):
    """The judge gave no usable verdict (its answer is the message)."""


def judge_prompt(pass_criterion: str, criterion: str, value: Any, output: Any) -> str:
    """The question for one criterion: the construct's pass criterion for context, the
    criterion, the input and the output, as JSON."""
    return (
        "You judge one output of a workflow against one criterion.\n"
        f"What passing means for this target: {pass_criterion}\n"
        f"Criterion: {criterion}\n"
        f"Input (JSON): {json.dumps(value, ensure_ascii=False, sort_keys=True)}\n"
        f"Output (JSON): {json.dumps(output, ensure_ascii=False, sort_keys=True)}\n"
        "Does the output meet the criterion? Answer with one word: yes or no."
    )


def parse_verdict(answer: str) -> bool | None:
    """``yes`` -> True, ``no`` -> False (the first word, any case, trailing punctuation
    ignored); anything else -> None."""
    words = answer.strip().split()
    first = words[0].strip(".!,:;\"'*").lower() if words else ""
    return {"yes": True, "no": False}.get(first)


def judge_rubric(
    rubric: list[Mapping[str, Any]],
    criteria: Mapping[str, str],
    pass_criterion: str,
    value: Any,
    output: Any,
    judge: Judge,
) -> list[dict[str, Any]]:
    """Each criterion's ``{criterionId, expected, verdict}``; raises :class:`JudgeError`
    when an answer is neither yes nor no."""
    verdicts = []
    for entry in rubric:
        cid = entry["criterionId"]
        answer = judge(judge_prompt(pass_criterion, criteria.get(cid, cid), value, output))
        verdict = parse_verdict(answer)
        if verdict is None:
            raise JudgeError(f"criterion {cid}: the judge answered {answer[:80]!r}, not yes or no")
        verdicts.append({"criterionId": cid, "expected": entry["expected"], "verdict": verdict})
    return verdicts
