"""Quota rules (pure): what ``LITTLE_QUOTAS`` says, checked, and which rules a call falls under.

The setting holds JSON, or the path of a JSON file::

    {
      "defaultOutputTokens": 1024,
      "rules": [
        {"name": "openai-main", "provider": "openai", "model": "gpt-4o*",
         "requests": "600/minute", "tokens": "150000/minute", "concurrent": 32},
        {"name": "anthropic", "provider": "anthropic",
         "inputTokens": "400000/minute", "outputTokens": "80000/minute"}
      ]
    }

A rule limits ``requests`` (calls), ``tokens`` (input plus output), ``inputTokens``,
``outputTokens`` per period, and ``concurrent`` calls in flight. A rate is a number (per
``period`` seconds, default 60) or a rate string as the ``limits`` library writes them
(``"600/minute"``, ``"10 per second"``, ``"100/2 seconds"``); the rates of one rule share one
period. ``provider``, ``model`` (shell patterns, ``*`` by default) and ``key`` (the first 16
hex digits of the SHA-256 of the API key a model slot's settings pass, see
:func:`key_fingerprint`; ``"default"`` for a slot that passes none) choose the calls a rule
limits; a call falls under every rule that matches it, and each rule is one budget shared by
all the calls it matches (``name`` identifies it in Redis: two fleets with one Redis and one
name share it). ``defaultOutputTokens`` is what a call reserves for its output when it sets no
``max_tokens``. ``daily``: dollar ceilings per UTC day (:mod:`.daily`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Final

from little_dist.errors import InvalidInputError
from little_dist.quotas.daily import DailyCeiling, parse_daily

__all__ = [
    "DEFAULT_OUTPUT_TOKENS",
    "Amounts",
    "CallIdentity",
    "QuotaConfigError",
    "QuotaRule",
    "QuotaRules",
    "key_fingerprint",
    "parse_quotas",
]

DEFAULT_OUTPUT_TOKENS: Final = 1024
_DEFAULT_PERIOD: Final = 60.0
_NAME = re.compile(r"^[A-Za-z0-9*][A-Za-z0-9*._:/-]{0,99}$")
_RATES: Final = {
    "requests": "requests",
    "tokens": "tokens",
    "inputTokens": "input_tokens",
    "outputTokens": "output_tokens",
}
_RULE_KEYS: Final = {"name", "provider", "model", "key", "period", "concurrent", *_RATES}
_TOP_KEYS: Final = {"rules", "defaultOutputTokens", "daily"}


class QuotaConfigError(InvalidInputError):
    """``LITTLE_QUOTAS`` cannot be used (one line says why)."""


@dataclass(frozen=True)
class CallIdentity:
    """Who a model call is charged to: its provider, model and API key fingerprint."""

    provider: str
    model: str
    key: str = "default"


@dataclass(frozen=True)
class Amounts:
    """What one call takes: requests, input tokens, output tokens."""

    requests: int = 1
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class QuotaRule:
    """One budget: its limits per ``period`` seconds (``None``: that dimension is free)."""

    name: str
    period: float = _DEFAULT_PERIOD
    requests: int | None = None
    tokens: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    concurrent: int | None = None
    provider: str = "*"
    model: str = "*"
    key: str = "*"

    def matches(self, call: CallIdentity) -> bool:
        return (
            fnmatchcase(call.provider, self.provider)
            and fnmatchcase(call.model, self.model)
            and fnmatchcase(call.key, self.key)
        )

    def too_large(self, amounts: Amounts) -> str | None:
        """Why ``amounts`` can never fit this rule (one call over a whole period's limit)."""
        for what, limit, need in (
            ("tokens", self.tokens, amounts.tokens),
            ("input tokens", self.input_tokens, amounts.input_tokens),
            ("output tokens", self.output_tokens, amounts.output_tokens),
        ):
            if limit is not None and need > limit:
                return (
                    f"the call needs {need} {what}, more than quota {self.name!r} allows in "
                    f"{self.period:g} s ({limit})"
                )
        return None


@dataclass(frozen=True)
class QuotaRules:
    """Every rule, and what a call without ``max_tokens`` reserves for its output."""

    rules: tuple[QuotaRule, ...] = ()
    default_output_tokens: int = DEFAULT_OUTPUT_TOKENS
    #: Daily dollar ceilings (:mod:`.daily`).
    daily: tuple[DailyCeiling, ...] = ()

    def for_call(self, call: CallIdentity) -> tuple[QuotaRule, ...]:
        """The rules ``call`` falls under (every one must admit it)."""
        return tuple(rule for rule in self.rules if rule.matches(call))

    def daily_for(self, call: CallIdentity) -> tuple[DailyCeiling, ...]:
        """The daily dollar ceilings ``call`` falls under."""
        return tuple(ceiling for ceiling in self.daily if ceiling.matches(call))


def key_fingerprint(api_key: str | None) -> str:
    """A rule's ``key`` for calls made with ``api_key`` (never the key itself)."""
    if not api_key:
        return "default"
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()[:16]


def parse_quotas(text: str) -> QuotaRules:
    """The rules in ``text`` (JSON, or a path to a JSON file); :class:`QuotaConfigError`
    with a one-line reason when they cannot be used."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        try:
            stripped = Path(stripped).expanduser().read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise QuotaConfigError(
                f"not JSON and not a readable file: {exc.__class__.__name__}"
            ) from exc
    try:
        data = json.loads(stripped)
    except ValueError as exc:
        raise QuotaConfigError(f"not valid JSON: {exc}") from exc
    if not isinstance(data, Mapping):
        raise QuotaConfigError("expected a JSON object with 'rules'")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise QuotaConfigError(f"unknown field(s) {', '.join(sorted(unknown))}")
    output = data.get("defaultOutputTokens", DEFAULT_OUTPUT_TOKENS)
    if not _whole(output) or output < 1:
        raise QuotaConfigError(f"defaultOutputTokens: expected a whole number >= 1, got {output!r}")
    items = data.get("rules", [])
    if not isinstance(items, list):
        raise QuotaConfigError("rules: expected a list")
    rules = [_rule(item, index) for index, item in enumerate(items)]
    days = data.get("daily", [])
    if not isinstance(days, list):
        raise QuotaConfigError("daily: expected a list")
    daily = [parse_daily(item, index, QuotaConfigError) for index, item in enumerate(days)]
    for names in ([rule.name for rule in rules], [ceiling.name for ceiling in daily]):
        for name in names:
            if names.count(name) > 1:
                raise QuotaConfigError(f"two rules are named {name!r}")
    return QuotaRules(tuple(rules), int(output), tuple(daily))


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _rule(item: Any, index: int) -> QuotaRule:
    where = f"rules[{index}]"
    if not isinstance(item, Mapping):
        raise QuotaConfigError(f"{where}: expected an object")
    unknown = set(item) - _RULE_KEYS
    if unknown:
        raise QuotaConfigError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    selectors = {}
    for field in ("provider", "model", "key"):
        value = item.get(field, "*")
        if not isinstance(value, str) or not value:
            raise QuotaConfigError(f"{where}.{field}: expected a non-empty string")
        selectors[field] = value
    name = item.get("name", f"{selectors['provider']}/{selectors['model']}/{selectors['key']}")
    if not isinstance(name, str) or not _NAME.match(name):
        raise QuotaConfigError(
            f"{where}.name: expected letters, digits, '*', '.', '_', ':', '/' or '-', got {name!r}"
        )
    period = item.get("period")
    if period is not None and (
        not isinstance(period, int | float) or isinstance(period, bool) or not 0 < period < 1e6
    ):
        raise QuotaConfigError(f"{where}.period: expected seconds greater than 0")
    rates: dict[str, int] = {}
    periods: set[float] = set()
    for field, attribute in _RATES.items():
        if field in item:
            amount, seconds = _rate(item[field], f"{where}.{field}")
            rates[attribute] = amount
            if seconds is not None:
                periods.add(seconds)
    if period is not None:
        periods.add(float(period))
    if len(periods) > 1:
        raise QuotaConfigError(
            f"{where}: its rates name different periods "
            f"({', '.join(f'{p:g} s' for p in sorted(periods))}); give each its own rule"
        )
    concurrent = item.get("concurrent")
    if concurrent is not None and (not _whole(concurrent) or concurrent < 1):
        raise QuotaConfigError(f"{where}.concurrent: expected a whole number >= 1")
    if not rates and concurrent is None:
        raise QuotaConfigError(f"{where}: limits nothing (give requests, tokens or concurrent)")
    return QuotaRule(
        name=name,
        period=periods.pop() if periods else _DEFAULT_PERIOD,
        requests=rates.get("requests"),
        tokens=rates.get("tokens"),
        input_tokens=rates.get("input_tokens"),
        output_tokens=rates.get("output_tokens"),
        concurrent=concurrent,
        provider=selectors["provider"],
        model=selectors["model"],
        key=selectors["key"],
    )


def _rate(value: Any, where: str) -> tuple[int, float | None]:
    """``(amount, period or None)`` of a number or a ``limits`` rate string."""
    if _whole(value) and value >= 1:
        return int(value), None
    if isinstance(value, str):
        from limits import parse  # the rate-string syntax operators know from Flask-Limiter

        try:
            item = parse(value)
        except ValueError:
            raise QuotaConfigError(
                f"{where}: expected a whole number or a rate such as '600/minute', got {value!r}"
            ) from None
        if item.amount < 1:
            raise QuotaConfigError(f"{where}: expected at least 1 per period, got {value!r}")
        return int(item.amount), float(item.get_expiry())
    raise QuotaConfigError(
        f"{where}: expected a whole number or a rate such as '600/minute', got {value!r}"
    )
