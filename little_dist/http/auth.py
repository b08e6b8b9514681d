"""The scope each ``/v1`` route requires: ``Depends(require(scope))``.

No ``Authorization: Bearer`` token, or one the fleet does not know (malformed, revoked):
401 with ``WWW-Authenticate: Bearer``. A valid token without the scope (``admin`` holds
every scope): 403. A token made with a rate that has used it up: 429 with ``Retry-After``
(:mod:`.rate_limits`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from anyio import to_thread
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from little_dist.http.fleet_access import FleetAccess
from little_dist.http.problems import Problem
from little_dist.http.tokens import TokenRecord

__all__ = ["require"]

_bearer = HTTPBearer(auto_error=False, description="a token from `little tokens create`")
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="little"'}


def require(scope: str) -> Callable[..., Awaitable[TokenRecord]]:
    """A dependency that answers the request's token record, if it holds ``scope``."""

    async def check(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> TokenRecord:
        if credentials is None or credentials.scheme.lower() != "bearer":
            raise Problem(
                401, "a bearer token is required (Authorization: Bearer TOKEN)", headers=_CHALLENGE
            )
        fleet: FleetAccess = request.app.state.fleet
        # In the event loop, not a thread: one Redis read, and a thread hop costs more than
        # it (a submission crosses to a thread once, for its route).
        record = await fleet.tokens().verify_async(credentials.credentials, fleet.async_redis)
        if record is None:
            raise Problem(
                401,
                "the bearer token is not valid (unknown, malformed or revoked)",
                headers={
                    **_CHALLENGE,
                    "WWW-Authenticate": 'Bearer realm="little", error="invalid_token"',
                },
            )
        if not record.allows(scope):
            raise Problem(
                403, f"the token lacks the scope {scope!r} (it holds {', '.join(record.scopes)})"
            )
        if record.rate is not None:
            wait = await to_thread.run_sync(fleet.rates().retry_after, record.id, record.rate)
            if wait is not None:
                raise Problem(
                    429,
                    f"the token's rate ({record.rate}) is used up: retry in {wait}s",
                    headers={"Retry-After": str(wait)},
                )
        return record

    check.__name__ = f"require_{scope.replace(':', '_')}"
    return check
