"""The judge ``little eval run`` asks about rubric criteria: the card's ``judge.modelPin``
(``providerId/modelId`` as a litellm model string) or ``--judge-model``, called through
litellm like any model slot (offline, a scripted model from ``LITTLE_SCRIPTED_MODEL`` or one
the workflow's module installs).

Each call is priced (:mod:`little_dist.evals.judge`) under ``--judge-pricing``, else, when
the judge model is one of the evaluated workflow's model slots, that slot's pricing (a
scripted stand-in priced as the model it stands for, as the workflow's own calls are), else
the judge model itself.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["judge_for"]


def judge_for(
    args: argparse.Namespace,
    bundle: Mapping[str, Any],
    bodies: Iterable[Any],
    slots: Callable[[], Mapping[str, str]] | None = None,
) -> Any:
    """The judge for this run, or ``None`` with ``--no-judge`` or no rubric to judge.
    ``slots()``: the workflow's model slots, litellm model -> pricing key."""
    if args.no_judge or not any(body["rubric"] for body in bodies):
        return None
    pin = bundle["manifest"]["judge"]["modelPin"]
    model = args.judge_model or f"{pin['providerId']}/{pin['modelId']}"
    pricing = args.judge_pricing or (slots() if slots else {}).get(model) or model

    from little_dist.cli.run_cmd import _install_scripted_model
    from little_dist.evals.judge import JudgeReply
    from little_dist.harness.model_calls import import_litellm, usage_from_response
    from little_dist.world.artifacts import now_iso

    _install_scripted_model()
    litellm = import_litellm()

    def ask(prompt: str) -> JudgeReply:
        started = time.monotonic()
        response = litellm.completion(
            model=model, messages=[{"role": "user", "content": prompt}], temperature=0
        )
        return JudgeReply(
            text=str(response.choices[0].message.content or ""),
            pricing=pricing,
            usage=usage_from_response(response),
            recorded_at=now_iso(),
            duration_ms=round((time.monotonic() - started) * 1000),
        )

    return ask
