"""What a scripted model answers: text, a JSON object, tool calls, or a failure.

A :class:`Reply` is plain data (no litellm import here), so a script can be built, saved to a
JSON file and loaded in another process before litellm is ever imported. The litellm objects
(``ModelResponse``, litellm's exception types) are made from it in :mod:`._provider`.

Token usage follows OpenAI's convention, which litellm keeps: ``input`` (``prompt_tokens``)
*includes* the ``cached`` prompt tokens, and ``output`` (``completion_tokens``) *includes* the
``reasoning`` tokens.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from little_dist.errors import InvalidInputError

__all__ = [
    "ERROR_KINDS",
    "Reply",
    "ReplyKind",
    "ToolCall",
    "Usage",
    "estimate_usage",
]

ReplyKind = Literal["text", "tool_calls", "error"]

# Failure names a script may ask for, and the litellm exception each one raises. These are the
# types litellm itself raises for real providers, so retry logic sees exactly what it would see.
ERROR_KINDS: Mapping[str, str] = {
    "rate_limit": "RateLimitError",
    "connection": "APIConnectionError",
    "timeout": "Timeout",
    "bad_request": "BadRequestError",
    "auth": "AuthenticationError",
    "server": "InternalServerError",
    "unavailable": "ServiceUnavailableError",
    "context_window": "ContextWindowExceededError",
    "content_policy": "ContentPolicyViolationError",
}


@dataclass(frozen=True)
class Usage:
    """Token counts for one model call (``input`` includes ``cached``; ``output`` includes
    ``reasoning``)."""

    input: int
    output: int
    cached: int = 0
    reasoning: int = 0

    def __post_init__(self) -> None:
        for name in ("input", "output", "cached", "reasoning"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidInputError(f"Usage.{name} must be a non-negative int, got {value!r}")
        if self.cached > self.input:
            raise InvalidInputError(
                f"Usage.cached ({self.cached}) cannot exceed Usage.input ({self.input})"
            )
        if self.reasoning > self.output:
            raise InvalidInputError(
                f"Usage.reasoning ({self.reasoning}) cannot exceed Usage.output ({self.output})"
            )

    def to_openai(self) -> dict[str, Any]:
        """The ``usage`` object of an OpenAI chat completion carrying these counts."""
        return {
            "prompt_tokens": self.input,
            "completion_tokens": self.output,
            "total_tokens": self.input + self.output,
            "prompt_tokens_details": {"cached_tokens": self.cached},
            "completion_tokens_details": {"reasoning_tokens": self.reasoning},
        }

    def to_dict(self) -> dict[str, int]:
        return {
            "input": self.input,
            "output": self.output,
            "cached": self.cached,
            "reasoning": self.reasoning,
        }

    @classmethod
    def from_value(cls, value: Usage | Mapping[str, Any]) -> Usage:
        if isinstance(value, Usage):
            return value
        unknown = set(value) - {"input", "output", "cached", "reasoning"}
        if unknown:
            raise InvalidInputError(f"unknown usage field(s): {', '.join(sorted(unknown))}")
        return cls(**value)


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model makes. ``arguments`` may be a raw string to script a model that
    sends malformed JSON; ``id`` defaults to a deterministic ``call_<n>_<i>``."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidInputError(
                f"a scripted tool call needs a non-empty name, got {self.name!r}"
            )

    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments), ensure_ascii=False, separators=(",", ":"))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "arguments": self.arguments}
        if isinstance(self.arguments, Mapping):
            out["arguments"] = dict(self.arguments)
        if self.id is not None:
            out["id"] = self.id
        return out


@dataclass(frozen=True)
class Reply:
    """One scripted answer.

    ``times`` is how many calls this reply serves before the next queued one takes over;
    ``None`` means it answers forever. ``latency`` (seconds) overrides the script's default.
    ``error`` is one of :data:`ERROR_KINDS` or an exception instance raised as is.
    """

    kind: ReplyKind
    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    error: str | BaseException | None = None
    error_message: str | None = None
    usage: Usage | None = None
    latency: float | None = None
    finish_reason: str | None = None
    times: int | None = 1

    def __post_init__(self) -> None:
        if self.times is not None and (
            not isinstance(self.times, int) or isinstance(self.times, bool) or self.times < 1
        ):
            raise InvalidInputError(f"times must be a positive int or None, got {self.times!r}")
        if self.latency is not None and self.latency < 0:
            raise InvalidInputError(f"latency must be >= 0 seconds, got {self.latency!r}")
        if self.kind == "tool_calls" and not self.tool_calls:
            raise InvalidInputError("a tool-call reply needs at least one tool call")
        if self.kind == "error":
            if isinstance(self.error, str):
                if self.error not in ERROR_KINDS:
                    raise InvalidInputError(
                        f"unknown scripted error {self.error!r}; expected one of "
                        f"{', '.join(ERROR_KINDS)} or an exception instance"
                    )
            elif not isinstance(self.error, BaseException):
                raise InvalidInputError(
                    f"an error reply needs an error name or an exception, got {self.error!r}"
                )

    @property
    def description(self) -> str:
        """A short human label, used in call logs and error messages."""
        if self.kind == "error":
            name = self.error if isinstance(self.error, str) else type(self.error).__name__
            return f"error:{name}"
        if self.kind == "tool_calls":
            return "tool_calls:" + ",".join(call.name for call in self.tool_calls)
        return "text"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form used in script files (see :mod:`.script_file`)."""
        out: dict[str, Any] = {}
        if self.kind == "error":
            if not isinstance(self.error, str):
                raise InvalidInputError(
                    "an error reply holding an exception instance cannot be saved to a file; "
                    "use an error name"
                )
            out["error"] = self.error
            if self.error_message is not None:
                out["message"] = self.error_message
        else:
            if self.text is not None:
                out["text"] = self.text
            if self.tool_calls:
                out["toolCalls"] = [call.to_dict() for call in self.tool_calls]
        if self.usage is not None:
            out["usage"] = self.usage.to_dict()
        if self.latency is not None:
            out["latency"] = self.latency
        if self.finish_reason is not None:
            out["finishReason"] = self.finish_reason
        out["times"] = self.times
        return out


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False, sort_keys=True, default=str)


def estimate_usage(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    reply: Reply,
    *,
    cached_share: float = 0.0,
    reasoning_share: float = 0.0,
) -> Usage:
    """Deterministic token counts from text lengths (about four characters a token).

    The same request and reply always give the same counts, so cost assertions are stable.
    ``cached_share`` of the input is reported as cached; ``reasoning_share`` of the output as
    reasoning.
    """
    prompt_chars = sum(len(_text_of(message)) for message in messages)
    prompt_chars += sum(len(_text_of(tool)) for tool in tools)
    completion_chars = len(reply.text or "")
    completion_chars += sum(len(c.name) + len(c.arguments_text()) for c in reply.tool_calls)
    input_tokens = max(1, math.ceil(prompt_chars / 4))
    output_tokens = max(1, math.ceil(completion_chars / 4))
    return Usage(
        input=input_tokens,
        output=output_tokens,
        cached=math.floor(input_tokens * cached_share),
        reasoning=math.floor(output_tokens * reasoning_share),
    )
