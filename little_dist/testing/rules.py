"""A rule of a scripted model: which calls it answers (step, model, run, text or a
predicate) and the queue of replies it answers them with."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from little_dist.testing.replies import Reply, ToolCall, Usage
from little_dist.testing.scripted_request import ScriptedRequest

__all__ = ["Matcher", "Rule"]

Matcher = Callable[[ScriptedRequest], bool]


class Rule:
    """Which calls a group of replies answers, and the replies' queue.

    Reply methods append to the queue and return the rule, so they chain; ``then_*`` are
    aliases that read well after the first.
    """

    def __init__(
        self,
        lock: threading.RLock,
        *,
        step: str | None = None,
        model: str | None = None,
        run: str | None = None,
        contains: str | None = None,
        match: Matcher | None = None,
    ) -> None:
        self._lock = lock
        self.step = step
        self.model = model
        self.run = run
        self.contains = contains
        self.match = match
        self._queue: list[list[Any]] = []  # [Reply, calls left or None for forever]
        self.replies: list[Reply] = []  # everything ever queued, for saving and reporting

    def matches(self, request: ScriptedRequest) -> bool:
        if self.step is not None and request.step_path != self.step:
            return False
        if self.model is not None and request.model != self.model:
            return False
        if self.run is not None and request.run_id != self.run:
            return False
        if self.contains is not None and self.contains not in request.last_user_text:
            return False
        return self.match is None or bool(self.match(request))

    def describe(self) -> str:
        parts = [
            f"{name}={value!r}"
            for name, value in (
                ("step", self.step),
                ("model", self.model),
                ("run", self.run),
                ("contains", self.contains),
            )
            if value is not None
        ]
        if self.match is not None:
            parts.append("match=<predicate>")
        return "on(" + ", ".join(parts) + ")"

    def pending(self) -> list[Reply]:
        """Queued replies not yet used up (forever replies excluded)."""
        with self._lock:
            return [reply for reply, left in self._queue if left is not None]

    def take(self, request: ScriptedRequest) -> Reply | None:
        """Consume and return the next reply if this rule has one and matches ``request``
        (``None`` otherwise). The script calls it holding its lock."""
        if not self._queue or not self.matches(request):
            return None
        return self._take()

    def _take(self) -> Reply | None:
        if not self._queue:
            return None
        entry = self._queue[0]
        reply: Reply = entry[0]
        if entry[1] is not None:
            entry[1] -= 1
            if entry[1] == 0:
                self._queue.pop(0)
        return reply

    def add(self, reply: Reply) -> Rule:
        """Queue a prepared :class:`Reply`."""
        with self._lock:
            self._queue.append([reply, reply.times])
            self.replies.append(reply)
        return self

    def reply_text(
        self,
        text: str,
        *,
        usage: Usage | None = None,
        latency: float | None = None,
        finish_reason: str | None = None,
        times: int | None = 1,
    ) -> Rule:
        """Answer with assistant text."""
        return self.add(
            Reply(
                "text",
                text=text,
                usage=usage,
                latency=latency,
                finish_reason=finish_reason,
                times=times,
            )
        )

    def reply_json(
        self,
        value: Any,
        *,
        usage: Usage | None = None,
        latency: float | None = None,
        finish_reason: str | None = None,
        times: int | None = 1,
    ) -> Rule:
        """Answer with ``value`` serialized as JSON text (what a model in JSON mode sends)."""
        text = json.dumps(value, ensure_ascii=False)
        return self.reply_text(
            text, usage=usage, latency=latency, finish_reason=finish_reason, times=times
        )

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        *,
        id: str | None = None,
        text: str | None = None,
        usage: Usage | None = None,
        latency: float | None = None,
        times: int | None = 1,
    ) -> Rule:
        """Answer with one tool call (``arguments`` as a raw string scripts malformed JSON)."""
        call = ToolCall(name, {} if arguments is None else arguments, id)
        return self.call_tools([call], text=text, usage=usage, latency=latency, times=times)

    def call_tools(
        self,
        calls: Sequence[ToolCall | tuple[str, Mapping[str, Any] | str]],
        *,
        text: str | None = None,
        usage: Usage | None = None,
        latency: float | None = None,
        times: int | None = 1,
    ) -> Rule:
        """Answer with several tool calls in one turn (parallel tool calls)."""
        tool_calls = tuple(c if isinstance(c, ToolCall) else ToolCall(*c) for c in calls)
        return self.add(
            Reply(
                "tool_calls",
                text=text,
                tool_calls=tool_calls,
                usage=usage,
                latency=latency,
                finish_reason="tool_calls",
                times=times,
            )
        )

    def raise_error(
        self,
        error: str | BaseException = "rate_limit",
        *,
        message: str | None = None,
        latency: float | None = None,
        times: int | None = 1,
    ) -> Rule:
        """Fail the call: an error name from ``ERROR_KINDS`` (raised as litellm's exception
        type) or an exception instance raised as is (litellm wraps foreign ones)."""
        return self.add(
            Reply("error", error=error, error_message=message, latency=latency, times=times)
        )

    then_reply_text = reply_text
    then_reply_json = reply_json
    then_call_tool = call_tool
    then_call_tools = call_tools
    then_raise_error = raise_error
