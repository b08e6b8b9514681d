"""Conversation compaction for the model loop (upstream's ``harness/conversation-compaction``).

A long tool loop (an orchestrator fanning out many sub-runs, a worker reading many files)
piles up bulky tool results that come to dominate the context window. Once a conversation's
serialized size passes ``max_chars``, :func:`compact_conversation` elides the *content* of
older tool results larger than ``min_elide_chars`` — the assistant messages that called them,
with each tool's name and arguments, stay — and keeps the first message (the task), every
system message and the last ``keep_recent_messages`` messages in full.

Pure: a function of the messages and the policy alone, no clock and no model call (no
summary), so a resumed attempt compacts exactly as the first did; the compacted messages are
what ``harness.model.called`` records and what the memo's ``promptHash`` is taken over, so a
replayed turn matches. The policy is therefore part of what a resume must keep: it is the
engine's fixed default (:data:`DEFAULT_COMPACTION`), as upstream's is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["DEFAULT_COMPACTION", "CompactionPolicy", "compact_conversation"]


@dataclass(frozen=True)
class CompactionPolicy:
    """When and what to compact (upstream's ``ConversationCompactionPolicy``)."""

    #: Compact only once the conversation's serialized size exceeds this many characters.
    max_chars: int
    #: Always keep this many of the most recent messages untouched.
    keep_recent_messages: int
    #: Only elide a tool result whose serialized size exceeds this.
    min_elide_chars: int


#: Upstream's default: about 250k characters (~60k tokens), clear of normal runs, so this is
#: a no-op until a loop genuinely runs long.
DEFAULT_COMPACTION: Final = CompactionPolicy(
    max_chars=250_000, keep_recent_messages=8, min_elide_chars=500
)


def _chars(value: Any) -> int:
    # JSON.stringify's length, as upstream counts (non-ASCII as itself, not escaped).
    try:
        return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    except (TypeError, ValueError):
        return len(str(value))


def _elided(message: Mapping[str, Any], min_elide_chars: int) -> Mapping[str, Any]:
    if message.get("role") != "tool" or "content" not in message:
        return message
    content = message["content"]
    size = len(content) if isinstance(content, str) else _chars(content)
    if size <= min_elide_chars:
        return message
    note = f"[context-compacted: {size} chars elided to save context; re-read via tools if needed]"
    return {**message, "content": note}


def compact_conversation(
    messages: Sequence[Mapping[str, Any]], policy: CompactionPolicy = DEFAULT_COMPACTION
) -> list[Mapping[str, Any]]:
    """``messages`` with older oversized tool results elided once the conversation is over
    ``policy.max_chars``; the same messages (a new list of the same objects) when it is
    under, or when nothing could be elided."""
    listed = list(messages)
    if len(listed) <= policy.keep_recent_messages + 1:
        return listed
    if sum(_chars(message) for message in listed) <= policy.max_chars:
        return listed
    keep_from = len(listed) - policy.keep_recent_messages
    first_user = next((i for i, m in enumerate(listed) if m.get("role") == "user"), 0)
    compacted: list[Mapping[str, Any]] = []
    for index, message in enumerate(listed):
        kept = index in (0, first_user) or index >= keep_from or message.get("role") == "system"
        compacted.append(message if kept else _elided(message, policy.min_elide_chars))
    return compacted
