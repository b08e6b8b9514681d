"""The ``--app`` module of the budget tests: :mod:`tests.quota_fleet_app`'s workflows with
their model priced as ``openai/gpt-4o-mini`` (the bundled registry's rates, so that the
CLI and the fleet's workers, which price with the registry and litellm's map, see dollars).

``fan`` (``quota.fan``): one ``ai.generate`` call of ``scripted/quota`` (64 output tokens
at most) per key, every branch ending whatever the others did; ``one``: a single call. The
provider is :func:`tests.quota_fleet_app.build_script` (from ``LITTLE_SCRIPTED_MODEL``).
"""

from __future__ import annotations

import dataclasses

from little_dist import model
from tests.quota_fleet_app import MAX_TOKENS, SLOT, build_script, fan, one

__all__ = ["build_script", "fan", "one", "worst_case_floor"]

_PRICED = model("scripted/quota", id=SLOT, max_tokens=MAX_TOKENS, pricing="openai/gpt-4o-mini")

fan = dataclasses.replace(fan, models={SLOT: _PRICED})
one = dataclasses.replace(one, models={SLOT: _PRICED})

#: The least a call's worst case can be: its 64 output tokens at gpt-4o-mini's $0.60/M.
worst_case_floor = MAX_TOKENS * 0.6 / 1_000_000
