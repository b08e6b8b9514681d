"""The JSON form of a :class:`ScriptedModel`, for worker processes started elsewhere.

::

    {
      "version": 1,
      "latency": 0.0, "cachedShare": 0.0, "reasoningShare": 0.0,
      "callLog": "/tmp/calls.jsonl",                       (optional)
      "providerQuota": {"requests": 600, "tokens": 150000,  (optional: the provider's
                        "period": 60, "redisUrl": "redis://..."}  limits, see provider_quota)
      "rules": [
        {"step": "summarize",
         "replies": [{"json": {"summary": "ok"},
                      "usage": {"input": 1200, "output": 80, "cached": 1000}}]},
        {"step": "flaky", "replies": [{"error": "rate_limit", "times": 2}, {"text": "ok"}]},
        {"model": "planner", "contains": "repair",
         "replies": [{"toolCalls": [{"name": "lookup", "arguments": {"id": "A1"}}]},
                     {"text": "done", "times": null}]}
      ],
      "otherwise": [{"text": "fallback", "times": null}]
    }

A rule's filters are ``step``, ``model``, ``runId`` and ``contains`` (see
:meth:`ScriptedModel.on`). A reply is exactly one of ``text``, ``json``, ``toolCalls``
(optionally with ``text``) or ``error`` (a name from ``ERROR_KINDS``, optional ``message``),
plus optional ``usage``, ``latency``, ``finishReason`` and ``times`` (default 1, ``null`` =
forever).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from little_dist.errors import InvalidInputError
from little_dist.testing.replies import Reply, ToolCall, Usage
from little_dist.testing.scripted import Rule, ScriptedModel

__all__ = ["FORMAT_VERSION", "dump_script", "load_script"]

FORMAT_VERSION = 1

_RULE_FILTERS = {"step": "step", "model": "model", "runId": "run", "contains": "contains"}
_REPLY_KEYS = {
    "text",
    "json",
    "toolCalls",
    "error",
    "message",
    "usage",
    "latency",
    "finishReason",
    "times",
}


def dump_script(script: ScriptedModel) -> dict[str, Any]:
    """The file form of ``script``'s configuration and every reply it was given."""
    rules: list[dict[str, Any]] = []
    for position, rule in enumerate(script.rules):
        if rule.match is not None:
            raise InvalidInputError(
                f"rule {position} ({rule.describe()}) uses a match= predicate, which cannot be "
                "saved; use step/model/run/contains filters"
            )
        entry: dict[str, Any] = {
            key: getattr(rule, attribute)
            for key, attribute in _RULE_FILTERS.items()
            if getattr(rule, attribute) is not None
        }
        entry["replies"] = [reply.to_dict() for reply in rule.replies]
        rules.append(entry)
    out: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "latency": script.latency,
        "cachedShare": script.cached_share,
        "reasoningShare": script.reasoning_share,
        "rules": rules,
        "otherwise": [reply.to_dict() for reply in script.otherwise().replies],
    }
    if script.call_log is not None:
        out["callLog"] = str(script.call_log)
    if script.quota is not None:
        out["providerQuota"] = script.quota.to_dict()
    return out


def load_script(data: Mapping[str, Any]) -> ScriptedModel:
    """Build a :class:`ScriptedModel` from its file form; bad input names the JSON path."""
    if not isinstance(data, Mapping):
        raise InvalidInputError("$: a scripted model file must hold a JSON object")
    version = data.get("version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise InvalidInputError(f"$.version: unsupported script format version {version!r}")
    unknown = set(data) - {
        "version",
        "latency",
        "cachedShare",
        "reasoningShare",
        "callLog",
        "providerQuota",
        "rules",
        "otherwise",
    }
    if unknown:
        raise InvalidInputError(f"$: unknown key(s) {', '.join(sorted(unknown))}")
    script = ScriptedModel(
        latency=float(data.get("latency", 0.0)),
        cached_share=float(data.get("cachedShare", 0.0)),
        reasoning_share=float(data.get("reasoningShare", 0.0)),
        call_log=data.get("callLog"),
        quota=None if data.get("providerQuota") is None else _quota(data["providerQuota"]),
    )
    for index, entry in enumerate(_list(data.get("rules", []), "$.rules")):
        path = f"$.rules[{index}]"
        if not isinstance(entry, Mapping):
            raise InvalidInputError(f"{path}: a rule must be an object")
        extra = set(entry) - set(_RULE_FILTERS) - {"replies"}
        if extra:
            raise InvalidInputError(f"{path}: unknown key(s) {', '.join(sorted(extra))}")
        filters = {attr: entry[key] for key, attr in _RULE_FILTERS.items() if key in entry}
        rule = script.on(**filters)
        _add_replies(rule, entry.get("replies", []), f"{path}.replies")
    _add_replies(script.otherwise(), data.get("otherwise", []), "$.otherwise")
    return script


def _list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidInputError(f"{path}: expected a list")
    return value


def _add_replies(rule: Rule, replies: Any, path: str) -> None:
    for index, item in enumerate(_list(replies, path)):
        rule.add(_reply(item, f"{path}[{index}]"))


def _reply(item: Any, path: str) -> Reply:
    if not isinstance(item, Mapping):
        raise InvalidInputError(f"{path}: a reply must be an object")
    extra = set(item) - _REPLY_KEYS
    if extra:
        raise InvalidInputError(f"{path}: unknown key(s) {', '.join(sorted(extra))}")
    try:
        usage = None if item.get("usage") is None else Usage.from_value(item["usage"])
        common: dict[str, Any] = {
            "usage": usage,
            "latency": item.get("latency"),
            "finish_reason": item.get("finishReason"),
            "times": item.get("times", 1),
        }
        if "error" in item:
            return Reply(
                "error",
                error=item["error"],
                error_message=item.get("message"),
                latency=common["latency"],
                times=common["times"],
            )
        if "toolCalls" in item:
            calls = tuple(
                ToolCall(call["name"], call.get("arguments", {}), call.get("id"))
                for call in _list(item["toolCalls"], f"{path}.toolCalls")
            )
            return Reply("tool_calls", text=item.get("text"), tool_calls=calls, **common)
        if "json" in item:
            return Reply("text", text=json.dumps(item["json"], ensure_ascii=False), **common)
        if "text" in item:
            return Reply("text", text=str(item["text"]), **common)
    except InvalidInputError as error:
        raise InvalidInputError(f"{path}: {error}") from error
    except (KeyError, TypeError) as error:
        raise InvalidInputError(f"{path}: malformed reply ({error})") from error
    raise InvalidInputError(f"{path}: a reply needs one of text, json, toolCalls or error")


def _quota(data: Any) -> Any:
    from little_dist.testing.provider_quota import ProviderQuota

    return ProviderQuota.from_dict(data)
