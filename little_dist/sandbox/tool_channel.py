"""The narrow channel a ``code.run`` program calls the step's tools through: :class:`ToolChannel`.

The program is untrusted and has no network; it reaches its step's tools through two pipes
passed into the sandbox (no socket, no file in a folder it can write). It writes one request
per line, ``{"tool": NAME, "args": {...}}``, and reads one answer per line, ``{"ok": true,
"result": ...}`` or ``{"ok": false, "error": {"message", "causeCode"}}``. A thread of the host
reads the requests, has ``handle`` answer each (the harness: permission rules, memo, events)
and writes the answers back.

What the program can send is bounded, and what it cannot be trusted to send ends it: a request
line over ``max_request_bytes``, a line that is not a JSON object naming a tool
(``malformed``), or more than ``max_calls`` requests in one run of the program ``breaks`` the
channel: :attr:`ToolChannel.failure` says why, :meth:`ToolChannel.broken` turns true (the
sandbox's stop check: the program is killed) and no further request is answered. An answer
over ``max_response_bytes`` is replaced by an error the program can read. The host never
blocks on a program that stops reading its answers: writes wait in short polls and give up
when the channel is closed.

``handle`` may raise: anything it raises (a budget exhausted, the attempt cancelled, a sub-run
to wait for) breaks the channel and is kept in :attr:`ToolChannel.raised` for the caller to
raise again once the program has ended.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final

__all__ = [
    "DEFAULT_MAX_CALLS",
    "MAX_REQUEST_BYTES",
    "MAX_RESPONSE_BYTES",
    "ToolChannel",
    "ToolHandler",
]

#: Upstream's ``maxToolCallsPerTurn`` default: the tool calls one run of a program may make.
DEFAULT_MAX_CALLS: Final = 100
MAX_REQUEST_BYTES: Final = 1024 * 1024
MAX_RESPONSE_BYTES: Final = 4 * 1024 * 1024
_MAX_TOOL_NAME: Final = 256
_CHUNK: Final = 65536
_POLL_SECONDS: Final = 0.1

#: ``handle(number, tool_name, args) -> answer``: ``number`` counts the run's calls from 1.
ToolHandler = Callable[[int, str, Any], Mapping[str, Any]]


class ToolChannel:
    """The host's end of one program run's tool channel (see the module docstring).

    Pass :attr:`child_fds` (``(answers_fd, requests_fd)``) to the sandboxed command
    (``pass_fds``) and tell the program their numbers; :meth:`start` before running it,
    :meth:`close` once it ended."""

    def __init__(
        self,
        handle: ToolHandler,
        *,
        max_calls: int = DEFAULT_MAX_CALLS,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self._handle = handle
        self.max_calls = max_calls
        self._max_request = max_request_bytes
        self._max_response = max_response_bytes
        self._requests, requests_child = os.pipe()
        answers_child, self._answers = os.pipe()
        # The program may run as another user (see little_dist.sandbox.process), and opens its
        # ends by /dev/fd: the pipes must be open to it. Only the two processes hold them.
        for fd in (requests_child, answers_child):
            os.fchmod(fd, 0o666)
        self.child_fds = (answers_child, requests_child)
        os.set_blocking(self._answers, False)
        self.calls = 0
        self.failure: str | None = None
        self.raised: BaseException | None = None
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="code-tools", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def broken(self) -> bool:
        """Whether the program must be stopped (the sandbox's stop check)."""
        return self.failure is not None

    def close(self) -> None:
        """Stop serving and close every end (call once the program ended)."""
        self._closed.set()
        for fd in self.child_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        if self._thread.ident is not None:
            self._thread.join()
        for fd in (self._requests, self._answers):
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> ToolChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _break(self, why: str) -> None:
        if self.failure is None:
            self.failure = why

    def _serve(self) -> None:
        pending = bytearray()
        while not self._closed.is_set() and self.failure is None:
            ready, _, _ = select.select([self._requests], [], [], _POLL_SECONDS)
            if not ready:
                continue
            chunk = os.read(self._requests, _CHUNK)
            if not chunk:
                return
            pending += chunk
            # Once closed (the program ended), what it left in the pipe is not answered.
            while self.failure is None and not self._closed.is_set() and b"\n" in pending:
                line, _, rest = bytes(pending).partition(b"\n")
                pending = bytearray(rest)
                if len(line) > self._max_request:
                    self._break(self._too_big())
                    break
                self._answer_line(line)
            if len(pending) > self._max_request:
                self._break(self._too_big())

    def _too_big(self) -> str:
        return f"a tool request is over {self._max_request} bytes"

    def _answer_line(self, line: bytes) -> None:
        request = _parsed(line)
        if isinstance(request, str):
            self._break(f"malformed tool request: {request}")
            return
        self.calls += 1
        if self.calls > self.max_calls:
            self._break(
                f"more than {self.max_calls} tool calls in one run of the program "
                "(causeCode max_tool_calls)"
            )
            return
        name, args = request
        try:
            answer = dict(self._handle(self.calls, name, args))
        except BaseException as exc:
            self.raised = exc
            self._break(f"tool {name!r} could not be called: {exc}")
            return
        self._write(answer)

    def _write(self, answer: Mapping[str, Any]) -> None:
        try:
            data = json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode()
        except (TypeError, ValueError) as exc:
            data = _error_frame(f"the tool's result is not JSON: {exc}")
        if len(data) > self._max_response:
            data = _error_frame(
                f"the tool's result is over {self._max_response} bytes; ask for less"
            )
        view = memoryview(data + b"\n")
        while view and not self._closed.is_set():
            _, ready, _ = select.select([], [self._answers], [], _POLL_SECONDS)
            if not ready:
                continue
            try:
                view = view[os.write(self._answers, view) :]
            except BlockingIOError:
                continue
            except OSError:  # the program is gone: nothing more to answer
                self._closed.set()
                return


def _error_frame(message: str) -> bytes:
    frame = {"ok": False, "error": {"message": message, "causeCode": "tool_error"}}
    return json.dumps(frame, separators=(",", ":")).encode()


def _parsed(line: bytes) -> tuple[str, Any] | str:
    """``(tool, args)`` from a request line, or what is wrong with it."""
    try:
        request = json.loads(line)
    except (UnicodeDecodeError, ValueError):
        return "not one JSON document"
    if not isinstance(request, dict):
        return "not a JSON object"
    name = request.get("tool")
    if not isinstance(name, str) or not name or len(name) > _MAX_TOOL_NAME:
        return f"'tool' must be a tool's name (a string of 1 to {_MAX_TOOL_NAME} characters)"
    unknown = sorted(set(request) - {"tool", "args"})
    if unknown:
        return f"unknown fields {', '.join(map(repr, unknown))[:200]}"
    return name, request.get("args", {})
