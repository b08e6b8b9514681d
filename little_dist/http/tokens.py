"""Bearer tokens of the HTTP API: scopes, stored hashed in the fleet's Redis.

A token reads ``ldt_<id>.<secret>``: ``id`` (12 hex) names its record, ``secret`` (32 random
bytes, URL-safe base64) is shown once, when it is made. Redis keeps, under the fleet's
key (:func:`~little_dist.world.fleet_keys.api_tokens_key`, a hash by id), the record: its
name, scopes, when it was made and the sha256 of the secret, never the secret. A token is
checked by its id's record and a constant-time comparison of the hashes; a revoked token's
record is gone, so the next request with it is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from little_dist.errors import InvalidInputError
from little_dist.http.rate_limits import check_rate

__all__ = ["ADMIN", "SCOPES", "IssuedToken", "TokenRecord", "TokenStore", "check_scopes"]

ADMIN: Final = "admin"
#: Every scope a token may hold; ``admin`` grants all of them.
SCOPES: Final = (
    "runs:submit",
    "runs:read",
    "runs:cancel",
    "approvals:decide",
    "schedules:write",
    ADMIN,
)
_PREFIX: Final = "ldt_"
_TOKEN: Final = re.compile(r"ldt_([0-9a-f]{12})\.([A-Za-z0-9_-]{20,100})")
_ID: Final = re.compile(r"[0-9a-f]{12}")
_NAME_MAX: Final = 200


def check_scopes(scopes: Iterable[str]) -> tuple[str, ...]:
    """The scopes, each known and said once, in :data:`SCOPES` order."""
    given = list(scopes)
    unknown = [scope for scope in given if scope not in SCOPES]
    if unknown:
        raise InvalidInputError(
            f"unknown scope {unknown[0]!r} (expected one of {', '.join(SCOPES)})"
        )
    if not given:
        raise InvalidInputError(f"a token needs at least one scope ({', '.join(SCOPES)})")
    return tuple(scope for scope in SCOPES if scope in given)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


@dataclass(frozen=True)
class TokenRecord:
    """What Redis keeps of a token."""

    id: str
    name: str
    scopes: tuple[str, ...]
    created_at: str
    secret_sha256: str
    #: Its requests' rate (``"600/minute"``; ``None``: no limit; see :mod:`.rate_limits`).
    rate: str | None = None
    #: The workflow ids it may submit runs of (empty: any).
    workflows: tuple[str, ...] = ()

    def may_submit(self, workflow_id: str) -> bool:
        return not self.workflows or workflow_id in self.workflows

    def allows(self, scope: str) -> bool:
        return ADMIN in self.scopes or scope in self.scopes

    def to_json(self) -> dict[str, Any]:
        """The record as ``little tokens list --json`` shows it (not the hash)."""
        return {
            "id": self.id,
            "name": self.name,
            "scopes": list(self.scopes),
            "createdAt": self.created_at,
            "rate": self.rate,
            "workflows": list(self.workflows),
        }

    @classmethod
    def from_stored(cls, token_id: str, raw: bytes | str) -> TokenRecord:
        data = json.loads(raw)
        return cls(
            id=token_id,
            name=str(data.get("name", "")),
            scopes=tuple(str(scope) for scope in data.get("scopes", ())),
            created_at=str(data.get("createdAt", "")),
            secret_sha256=str(data.get("secretSha256", "")),
            rate=str(data["rate"]) if data.get("rate") else None,
            workflows=tuple(str(workflow) for workflow in data.get("workflows") or ()),
        )


@dataclass(frozen=True)
class IssuedToken:
    """A token just made: its record and the token itself (shown once)."""

    record: TokenRecord
    token: str


def _parts(token: str) -> tuple[str, str] | None:
    """A token's id and secret; ``None`` if it is not one."""
    match = _TOKEN.fullmatch(token)
    return None if match is None else (match[1], match[2])


def _checked(token_id: str, secret: str, raw: bytes | str | None) -> TokenRecord | None:
    """The stored record ``raw`` if the secret's hash is the one it holds."""
    if raw is None:
        return None
    record = TokenRecord.from_stored(token_id, raw)
    if not hmac.compare_digest(record.secret_sha256, _digest(secret)):
        return None
    return record


class TokenStore:
    """The fleet's tokens in one Redis hash (``redis``: a sync redis-py client)."""

    def __init__(self, redis: Any, key: str) -> None:
        self._redis = redis
        self._key = key

    def create(
        self,
        scopes: Iterable[str],
        name: str = "",
        rate: str | None = None,
        workflows: Iterable[str] = (),
    ) -> IssuedToken:
        """Make a token with ``scopes`` (checked), an optional ``rate`` (``"600/minute"``) and
        the ``workflows`` it may submit runs of (none given: any); the token is in the
        answer only."""
        checked = check_scopes(scopes)
        allowed = tuple(dict.fromkeys(workflows))
        if any(not workflow or len(workflow) > _NAME_MAX for workflow in allowed):
            raise InvalidInputError(f"--workflow: expected 1 to {_NAME_MAX} characters")
        if rate is not None:
            check_rate(rate)
        if len(name) > _NAME_MAX:
            raise InvalidInputError(f"--name: longer than {_NAME_MAX} characters")
        secret = secrets.token_urlsafe(32)
        while True:
            token_id = secrets.token_hex(6)
            record = TokenRecord(
                id=token_id,
                name=name,
                scopes=checked,
                created_at=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
                secret_sha256=_digest(secret),
                rate=rate,
                workflows=allowed,
            )
            stored = json.dumps(
                {
                    "name": name,
                    "scopes": list(checked),
                    "createdAt": record.created_at,
                    "secretSha256": record.secret_sha256,
                    "rate": rate,
                    "workflows": list(allowed),
                }
            )
            if self._redis.hsetnx(self._key, token_id, stored):
                return IssuedToken(record, f"{_PREFIX}{token_id}.{secret}")

    def list(self) -> list[TokenRecord]:
        """Every token's record, oldest first."""
        stored = self._redis.hgetall(self._key)
        records = [
            TokenRecord.from_stored(key.decode() if isinstance(key, bytes) else key, raw)
            for key, raw in stored.items()
        ]
        return sorted(records, key=lambda record: (record.created_at, record.id))

    def revoke(self, token_id: str) -> bool:
        """Remove a token; ``False`` if there was none with that id."""
        if not _ID.fullmatch(token_id):
            raise InvalidInputError(f"invalid token id {token_id!r} (expected 12 hex digits)")
        return bool(self._redis.hdel(self._key, token_id))

    def verify(self, token: str) -> TokenRecord | None:
        """The record of a valid token; ``None`` for anything else."""
        parts = _parts(token)
        if parts is None:
            return None
        return _checked(*parts, self._redis.hget(self._key, parts[0]))

    async def verify_async(self, token: str, redis: Any) -> TokenRecord | None:
        """:meth:`verify` over ``redis``, a ``redis.asyncio`` client of the same Redis: what
        the API's event loop checks each request's token with, without a thread."""
        parts = _parts(token)
        if parts is None:
            return None
        return _checked(*parts, await redis.hget(self._key, parts[0]))
