"""Workflow versions: documents in S3, the claim and the definition index in Redis; and
the parts the fleet's versions share (:mod:`little_dist.fleet.versions`), in S3 by digest.

Version documents are immutable S3 objects written put-if-absent; the only compare-and-set
(a version id claimed by one document) is a Redis ``SET NX`` of the document's digest,
because S3 ``If-Match`` is not race-safe on every S3 store. The version index (definition
hash -> version ids, oldest first) is one Redis list per definition, under its own hash
tag; a script appends an id only when it is absent.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from little_dist.canonical import canonical_json, sha256_hex_text
from little_dist.errors import ConflictError, InvalidInputError
from little_dist.world.base import VersionNotFoundError
from little_dist.world.defaults import validate_definition_hash, validate_version_id
from little_dist.world.redis_s3 import scripts
from little_dist.world.redis_s3.keys import KeyLayout
from little_dist.world.redis_s3.redis_calls import LuaScript, redis_errors, text
from little_dist.world.redis_s3.s3 import S3Objects

__all__ = ["VersionStore"]

_REMEMBERED = 4096  # registered version ids a process remembers


class VersionStore:
    """Register, read and index workflow versions."""

    def __init__(self, client: redis.Redis, objects: S3Objects, keys: KeyLayout) -> None:
        self._redis = client
        self._s3 = objects
        self._keys = keys
        # Appends an id only when absent: running it twice is running it once.
        self._index_script = LuaScript(client, scripts.INDEX_VERSION, idempotent=True)
        # Versions this process registered (id -> digest): immutable and never deleted, so
        # submitting the same workflow again skips the claim and the S3 put.
        self._registered: dict[str, str] = {}
        # Shared parts this process stored or found (digests): put once per process.
        self._parts: set[str] = set()

    def register(self, version_id: str, document: dict[str, Any]) -> None:
        validate_version_id(version_id)
        if not isinstance(document, dict):
            raise InvalidInputError(f"A workflow version document must be an object: {version_id}")
        body = canonical_json(document)
        digest = sha256_hex_text(body)
        known = self._registered.get(version_id)
        if known == digest:
            return
        if known is not None:
            raise ConflictError(
                f"Workflow version {version_id} is already registered with a different document"
            )
        key = self._keys.version(version_id)
        with redis_errors(f"registration of version {version_id}"):
            # The claim is the compare-and-set (S3 If-Match is not race-safe everywhere);
            # S3 then only ever receives the winning document.
            claimed = self._redis.set(key, digest, nx=True)
            current = None if claimed else self._redis.get(key)
        if current is not None and text(current) != digest:
            raise ConflictError(
                f"Workflow version {version_id} is already registered with a different document"
            )
        self._s3.put_if_absent(
            self._keys.version_document(version_id), body.encode("utf-8"), "application/json"
        )
        if len(self._registered) >= _REMEMBERED:
            self._registered.clear()
        self._registered[version_id] = digest

    def put_part(self, body: str) -> str:
        """Store a shared version part (canonical JSON text) by its digest; the digest,
        ``sha256:`` + hex. One S3 request the first time this process stores it, none after.
        """
        digest = sha256_hex_text(body)
        if digest not in self._parts:
            self._s3.put_if_absent(
                self._keys.version_part(digest), body.encode("utf-8"), "application/json"
            )
            if len(self._parts) >= _REMEMBERED:
                self._parts.clear()
            self._parts.add(digest)
        return f"sha256:{digest}"

    def get_part(self, ref: str) -> str:
        """The shared part ``ref`` (``sha256:`` + hex) names, checked against it."""
        digest = ref.removeprefix("sha256:")
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise InvalidInputError(f"Invalid workflow version part reference: {ref!r}")
        body = self._s3.get(self._keys.version_part(digest))
        if body is None:
            raise VersionNotFoundError(ref)
        text_body = body.decode("utf-8")
        if sha256_hex_text(text_body) != digest:
            raise ConflictError(f"Workflow version part {ref} does not match its digest")
        self._parts.add(digest)
        return text_body

    def get(self, version_id: str) -> dict[str, Any]:
        validate_version_id(version_id)
        body = self._s3.get(self._keys.version_document(version_id))
        if body is None:
            raise VersionNotFoundError(version_id)
        document: dict[str, Any] = json.loads(body)
        return document

    def _index_key(self, definition_hash: str) -> str:
        # Its own hash tag: the index of one definition lives in one cluster slot.
        return f"{self._keys.redis_prefix}version-index:{{{definition_hash}}}"

    def index(self, definition_hash: str, version_id: str) -> None:
        validate_definition_hash(definition_hash)
        validate_version_id(version_id)
        with redis_errors(f"indexing of version {version_id}"):
            self._index_script([self._index_key(definition_hash)], [version_id])

    def indexed(self, definition_hash: str) -> list[str]:
        validate_definition_hash(definition_hash)
        with redis_errors("reading the version index"):
            members = self._redis.lrange(self._index_key(definition_hash), 0, -1)
        return [text(member) for member in members]
