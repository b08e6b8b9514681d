"""A cap on request bodies: more than ``limit`` bytes is a 413 before it is all read.

uvicorn reads whatever a client sends; the engine's own input limits
(``LITTLE_MAX_INPUT_BYTES``) apply once the body is parsed, too late for a body of
gigabytes. This ASGI middleware refuses a declared ``Content-Length`` over the cap at once,
and a body sent without one (chunked) as soon as its bytes pass it.
"""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodyLimit"]


class BodyLimit:
    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    def _too_big(self, size: str) -> HTTPException:
        return HTTPException(
            413, f"the request body is {size} bytes, over this server's {self.limit}"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: Any = dict(scope.get("headers") or ())
        declared = headers.get(b"content-length", b"").decode("latin-1")
        received = 0

        async def limited() -> Message:
            nonlocal received
            # Raised from inside the body's read, the route's handlers answer it (a problem).
            if declared.isdigit() and int(declared) > self.limit:
                raise self._too_big(declared)
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise self._too_big(f"more than {received}")
            return message

        await self.app(scope, limited, send)
