"""The judge ``little eval run`` asks about rubric criteria: the card's ``judge.modelPin``
(``providerId/modelId`` as a litellm model string) or ``--judge-model``, called through
litellm like any model slot (offline, a scripted model from ``LITTLE_SCRIPTED_MODEL``)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["judge_for"]


def judge_for(args: argparse.Namespace, bundle: Mapping[str, Any], bodies: Iterable[Any]) -> Any:
    """The judge for this run, or ``None`` with ``--no-judge`` or no rubric to judge."""
    if args.no_judge or not any(body["rubric"] for body in bodies):
        return None
    pin = bundle["manifest"]["judge"]["modelPin"]
    model = args.judge_model or f"{pin['providerId']}/{pin['modelId']}"

    from little_dist.cli.run_cmd import _install_scripted_model
    from little_dist.harness.model_calls import import_litellm

    _install_scripted_model()
    litellm = import_litellm()

    def ask(prompt: str) -> str:
        response = litellm.completion(
            model=model, messages=[{"role": "user", "content": prompt}], temperature=0
        )
        return str(response.choices[0].message.content or "")

    return ask
