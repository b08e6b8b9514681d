"""Rubric criteria judged by a model (the card's ``judge``): for each criterion an item's
rubric lists, the judge is asked whether the output meets it, and its yes/no must be the
item's ``expected``.

Upstream defines the rubric (``{criterionId, expected}`` in the body, the criterion's text in
the construct) and pins the judge model in the card, but no judging loop; this one asks one
question per criterion, answered ``yes`` or ``no``, and counts any other answer as the
judge's error rather than guessing.

A judge that says what its call cost (a :class:`JudgeReply`: the model that answered, its
token usage, when) has each call priced as a workflow's model calls are
(:func:`~little_dist.pricing.price_model_call`, with litellm's rates for models the registry
lacks) and kept with its verdict (``call``), from which the eval run's events and the judging
cost in its table are made (:func:`judge_events`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from little_dist.canonical import sha256_digest
from little_dist.litellm_prices import litellm_price_fallback
from little_dist.pricing import ModelIdentity, price_model_call

__all__ = [
    "Judge",
    "JudgeError",
    "JudgeReply",
    "judge_cost",
    "judge_events",
    "judge_prompt",
    "judge_rubric",
    "parse_verdict",
]


@dataclass(frozen=True)
class JudgeReply:
    """A judge's answer with what its model call was: ``pricing`` is the ``provider/model``
    key it is priced under, ``usage`` upstream's usage object (``inputTokens``, ...)."""

    text: str
    pricing: str
    usage: Mapping[str, Any] = field(default_factory=dict)
    recorded_at: str = ""
    duration_ms: int = 0


#: A judge: the question in, the model's answer (its text, or a :class:`JudgeReply`) out.
Judge = Callable[[str], "str | JudgeReply"]


class JudgeError(Exception):
    """The judge gave no usable verdict (its answer is the message); ``calls``: the priced
    calls made until then, the unusable answer's included (they were paid for)."""

    def __init__(self, message: str, calls: Iterable[Mapping[str, Any]] = ()) -> None:
        super().__init__(message)
        self.calls = [dict(call) for call in calls]


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
    """Each criterion's ``{criterionId, expected, verdict}`` (and ``call``: the priced model
    call, for a judge that returns :class:`JudgeReply`); raises :class:`JudgeError` when an
    answer is neither yes nor no (its ``calls``: the calls made until then)."""
    verdicts: list[dict[str, Any]] = []
    for entry in rubric:
        cid = entry["criterionId"]
        prompt = judge_prompt(pass_criterion, criteria.get(cid, cid), value, output)
        reply = judge(prompt)
        call = None if isinstance(reply, str) else _priced(reply, prompt, cid)
        answer = reply if isinstance(reply, str) else reply.text
        verdict = parse_verdict(answer)
        if verdict is None:
            raise JudgeError(
                f"criterion {cid}: the judge answered {answer[:80]!r}, not yes or no",
                [v["call"] for v in verdicts if "call" in v] + ([call] if call else []),
            )
        found = {"criterionId": cid, "expected": entry["expected"], "verdict": verdict}
        verdicts.append(found if call is None else {**found, "call": call})
    return verdicts


def judge_cost(calls: Iterable[Mapping[str, Any]]) -> float | None:
    """What ``calls`` cost together: ``None`` while none of them could be priced."""
    costs = [c["costUsd"] for c in calls if c.get("costUsd") is not None]
    return round(sum(costs), 10) if costs else None


def judge_events(cases: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The judge's model calls of an eval run's ``cases`` as events (upstream's
    ``harness.model.responded`` payload, ``role: "judge"``, with the item, the sample and the
    criterion it judged, and its price), ``sequence`` 1.. in case, sample, criterion order."""
    events: list[dict[str, Any]] = []
    for case in cases:
        if case.get("reused"):
            continue  # (its calls are the events of the run it comes from)
        for number, sample in enumerate(case.get("samples", []), start=1):
            for call in sample.get("judgeCalls", []):
                events.append(
                    {
                        "sequence": len(events) + 1,
                        "type": "harness.model.responded",
                        "recordedAt": call["recordedAt"],
                        "payload": {
                            "role": "judge",
                            "itemSha": case["itemSha"],
                            "sample": number,
                            **{k: v for k, v in call.items() if k != "recordedAt"},
                        },
                    }
                )
    return events


def _priced(reply: JudgeReply, prompt: str, criterion_id: str) -> dict[str, Any]:
    identity = ModelIdentity.from_key(reply.pricing)
    priced = price_model_call(identity, reply.usage, fallback=litellm_price_fallback)
    return {
        "criterionId": criterion_id,
        "callId": f"judge:{criterion_id}",
        "model": {"provider": identity.provider, "modelId": identity.model_id},
        "promptHash": sha256_digest(prompt),
        "response": {"text": reply.text, "usage": dict(reply.usage)},
        "costUsd": priced.cost_usd,
        "durationMs": reply.duration_ms,
        "recordedAt": reply.recorded_at,
    }
