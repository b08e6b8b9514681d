"""Values as the log stores them: plain JSON (:func:`json_safe`), and their digests
(:func:`digest_and_size` from one encoding; :func:`frozen_digest` of a value built once and
never mutated, cached by identity)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from pydantic import BaseModel

from little_dist.canonical import canonical_json, sha256_digest, sha256_hex_text

__all__ = ["digest_and_size", "frozen_digest", "json_safe"]

# id(value) -> (value, digest). The entry keeps the value alive, so its id cannot be reused
# for another object while cached.
_frozen_digests: dict[int, tuple[Any, str]] = {}
_FROZEN_DIGESTS_MAX: Final = 4096


def frozen_digest(value: Any) -> str:
    """``sha256_digest(json_safe(value))`` of a value that is never mutated once built (a
    tool's input schema, a compiled plan's step object), cached by identity: computed once
    per object."""
    found = _frozen_digests.get(id(value))
    if found is not None and found[0] is value:
        return found[1]
    digest = sha256_digest(json_safe(value))
    if len(_frozen_digests) >= _FROZEN_DIGESTS_MAX:
        _frozen_digests.clear()
    _frozen_digests[id(value)] = (value, digest)
    return digest


def digest_and_size(value: Any) -> tuple[str, int]:
    """``(sha256_digest(value), UTF-8 size of its canonical JSON)`` from one encoding."""
    text = canonical_json(value)
    return "sha256:" + sha256_hex_text(text), len(text.encode("utf-8"))


def json_safe(value: Any) -> Any:
    """``value`` as plain JSON data (pydantic models and dataclasses dumped, tuples as lists).

    Values with no JSON form are given as their ``str``: tool results must survive the log.
    """
    # Most of what the harness logs is plain already: exact types first (none of them can be
    # a model or a dataclass), the general checks below for the rest.
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is dict:
        return {
            key if type(key) is str else str(key): json_safe(item) for key, item in value.items()
        }
    if kind is list or kind is tuple:
        return [json_safe(item) for item in value]
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_safe(dataclasses.asdict(value))
    if isinstance(value, Mapping):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    return str(value)
