"""What a model call is charged before it is sent: who pays, and how much at most.

Input tokens are counted with litellm's ``token_counter`` (imported when first needed; a
model litellm does not know is counted with its default tokenizer); output tokens are the
call's ``max_tokens`` (``max_completion_tokens``), else the rules' ``defaultOutputTokens``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from little_dist.quotas.rules import Amounts, CallIdentity, key_fingerprint

__all__ = ["call_identity", "estimate_amounts"]

_OUTPUT_LIMITS = ("max_completion_tokens", "max_tokens", "max_output_tokens")


def call_identity(litellm_model: str, settings: Mapping[str, Any]) -> CallIdentity:
    """The provider, model and API key fingerprint a call to ``litellm_model`` is made with."""
    provider, _, model = litellm_model.partition("/")
    if not model:  # a bare model name: litellm's default provider
        provider, model = "openai", litellm_model
    api_key = settings.get("api_key")
    return CallIdentity(
        provider, model, key_fingerprint(api_key if isinstance(api_key, str) else None)
    )


def estimate_amounts(
    litellm_model: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    settings: Mapping[str, Any],
    *,
    default_output_tokens: int,
) -> Amounts:
    """The most one call may take: its prompt's tokens plus its output limit."""
    output = default_output_tokens
    for name in _OUTPUT_LIMITS:
        value = settings.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            output = value
            break
    return Amounts(1, _prompt_tokens(litellm_model, messages, tools), output)


def _prompt_tokens(
    model: str, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
) -> int:
    from little_dist.harness.model_calls import import_litellm

    try:
        counted = import_litellm().token_counter(
            model=model,
            messages=[dict(m) for m in messages],
            tools=[dict(t) for t in tools] or None,
        )
        return max(int(counted), 1)
    except Exception:  # an exotic message shape: about four characters a token
        text = json.dumps([list(messages), list(tools)], default=str)
        return max(len(text) // 4, 1)
