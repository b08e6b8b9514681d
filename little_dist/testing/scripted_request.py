"""One call as the scripted provider received it: messages, tools, the ``little`` routing
metadata (step path, run id), and the reply it got."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from little_dist.errors import InvalidInputError
from little_dist.testing.replies import Reply

__all__ = ["METADATA_KEY", "ScriptedRequest", "message_dict"]

METADATA_KEY = "little"


def message_dict(message: Any) -> dict[str, Any]:
    # A tool loop often appends the response's own Message object to the history.
    if isinstance(message, Mapping):
        return json.loads(json.dumps(dict(message), default=str))  # type: ignore[no-any-return]
    dump = getattr(message, "model_dump", None)
    if callable(dump):
        return json.loads(json.dumps(dump(exclude_none=True), default=str))  # type: ignore[no-any-return]
    raise InvalidInputError(f"a chat message must be a mapping, got {type(message).__name__}")


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    return ""


@dataclass(frozen=True)
class ScriptedRequest:
    """One call as the scripted provider received it (messages copied at call time)."""

    index: int
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    reply: Reply | None = None

    @property
    def step_path(self) -> str | None:
        little = self.metadata.get(METADATA_KEY)
        value = little.get("stepPath") if isinstance(little, Mapping) else None
        return value if isinstance(value, str) else None

    @property
    def run_id(self) -> str | None:
        little = self.metadata.get(METADATA_KEY)
        value = little.get("runId") if isinstance(little, Mapping) else None
        return value if isinstance(value, str) else None

    @property
    def last_user_text(self) -> str:
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return _content_text(message.get("content"))
        return ""

    @property
    def tool_names(self) -> list[str]:
        """Names of the tools offered to the model in this call."""
        return [str(tool.get("function", {}).get("name")) for tool in self.tools]

    @property
    def tool_results(self) -> list[dict[str, Any]]:
        """The ``role: tool`` messages in the history, oldest first."""
        return [message for message in self.messages if message.get("role") == "tool"]

    def to_record(self) -> dict[str, Any]:
        """The JSON form written to a call log."""
        return {
            "index": self.index,
            "pid": os.getpid(),
            "model": self.model,
            "stepPath": self.step_path,
            "runId": self.run_id,
            "metadata": self.metadata,
            "messages": self.messages,
            "tools": self.tools,
            "reply": None if self.reply is None else self.reply.description,
        }
