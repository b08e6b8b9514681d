"""Eval sets of a :class:`~little_dist.world.redis_s3.RedisS3World`: S3 objects named by their
content, and a small Redis index.

The objects keep upstream's local layout under the world's S3 prefix, with the same bytes
(``eval-set-store.ts``: canonical JSON and a newline):

    eval-sets/<evset_id>.json                 the registered version (its id is its hash's)
    eval-items/<2 hex>/<bodySha hex>.json     a body, verifiable against its own address
    eval-runs/<evset_id>/<stamp>-<hex>.json   one eval run's result; ``hex`` is the sha256 of
                                              its bytes, so the name is its content's too

Every object is written put-if-absent (S3's ``If-None-Match``, race-safe on the servers we
test): a second writer of the same bytes finds them there, different bytes under a set's or a
body's address are refused. What is mutable is in Redis, never S3 (see DESIGN.md):
``<prefix>eval-sets`` (a set of ids, for listing) and ``<prefix>eval-runs:<evset_id>`` (a
list of the set's run objects, oldest first: the last is what the next run compares with).
A writer that dies between the object and its index entry leaves an object nothing lists;
the next run is indexed as usual.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Final

import redis

from little_dist.canonical import canonical_json, sha256_digest
from little_dist.errors import InvalidInputError, NotFoundError
from little_dist.evals.bundle import EvalSetVersion
from little_dist.world.redis_s3.redis_calls import redis_errors
from little_dist.world.redis_s3.s3 import S3Objects

__all__ = ["RedisS3EvalStore"]

_EVAL_SET_ID = re.compile(r"evset_[A-Za-z0-9_-]{1,80}")
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
_STAMP = re.compile(r"[0-9]{1,40}")
_JSON: Final = "application/json"


class RedisS3EvalStore:
    """The eval sets of one Redis and one bucket (see the module docstring)."""

    def __init__(
        self, redis_client: redis.Redis, objects: S3Objects, *, key_prefix: str, s3_prefix: str
    ) -> None:
        self._redis = redis_client
        self._objects = objects
        self._key_prefix = key_prefix
        self._s3_prefix = s3_prefix
        self.where = f"s3://{objects.bucket}/{s3_prefix}"

    # -- bundles ----------------------------------------------------------------------------

    def put_eval_set(self, version: EvalSetVersion) -> None:
        key = self._set_key(version.id)
        self._put_once(key, canonical_json(version.to_json()) + "\n")
        with redis_errors(f"indexing eval set {version.id}"):
            self._redis.sadd(f"{self._key_prefix}eval-sets", version.id)

    def get_eval_set(self, eval_set_id: str) -> dict[str, Any]:
        key = self._set_key(eval_set_id)
        stored = self._read_json(key, f"eval set {eval_set_id}")
        if not isinstance(stored, dict) or sha256_digest(stored.get("bundle")) != stored.get(
            "hash"
        ):
            raise InvalidInputError(f"{key}: the stored eval set does not match its hash")
        return stored

    def eval_set_ids(self) -> list[str]:
        with redis_errors("listing eval sets"):
            members = self._redis.smembers(f"{self._key_prefix}eval-sets")
        ids = (_text(m) for m in members)
        return sorted(i for i in ids if _EVAL_SET_ID.fullmatch(i))

    def known_lineages(self) -> set[str]:
        """The ``workflowName`` of every stored eval set (the world's workflow versions are
        not listed by name on Redis and S3, so they establish no lineage here)."""
        names: set[str] = set()
        for eval_set_id in self.eval_set_ids():
            try:
                names.add(self.get_eval_set(eval_set_id)["bundle"]["manifest"]["workflowName"])
            except (InvalidInputError, NotFoundError, KeyError, TypeError):
                continue  # (an object we cannot read establishes no lineage)
        return names

    # -- bodies -----------------------------------------------------------------------------

    def put_body(self, body_sha: str, canonical: str) -> None:
        self._put_once(self._body_key(body_sha), canonical + "\n")

    def get_body(self, body_sha: str) -> Any:
        body = self._read_json(self._body_key(body_sha), f"eval item body {body_sha}")
        actual = sha256_digest(body)
        if actual != body_sha:
            raise InvalidInputError(
                f"stored eval item body hashes to {actual}, not to its address {body_sha}"
            )
        return body

    # -- runs -------------------------------------------------------------------------------

    def put_run(self, eval_set_id: str, stamp: str, result: dict[str, Any]) -> str:
        if not _STAMP.fullmatch(stamp):
            raise InvalidInputError(f"invalid eval run stamp: {stamp!r}")
        data = (json.dumps(result, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")
        name = f"{stamp}-{hashlib.sha256(data).hexdigest()}.json"
        key = f"{self._s3_prefix}eval-runs/{self._checked_id(eval_set_id)}/{name}"
        self._objects.put_if_absent(key, data, _JSON)
        with redis_errors(f"indexing a run of eval set {eval_set_id}"):
            self._redis.rpush(self._runs_key(eval_set_id), key)
        return f"s3://{self._objects.bucket}/{key}"

    def last_run(self, eval_set_id: str) -> dict[str, Any] | None:
        with redis_errors(f"reading the runs of eval set {eval_set_id}"):
            key = self._redis.lindex(self._runs_key(eval_set_id), -1)
        if key is None:
            return None
        found = self._read_json(_text(key), "the last eval run")
        return found if isinstance(found, dict) else None

    # -- keys and objects -------------------------------------------------------------------

    def _checked_id(self, eval_set_id: str) -> str:
        if not isinstance(eval_set_id, str) or not _EVAL_SET_ID.fullmatch(eval_set_id):
            raise InvalidInputError(f"invalid eval set id: {eval_set_id!r}")
        return eval_set_id

    def _set_key(self, eval_set_id: str) -> str:
        return f"{self._s3_prefix}eval-sets/{self._checked_id(eval_set_id)}.json"

    def _runs_key(self, eval_set_id: str) -> str:
        return f"{self._key_prefix}eval-runs:{self._checked_id(eval_set_id)}"

    def _body_key(self, body_sha: str) -> str:
        match = _DIGEST.fullmatch(body_sha) if isinstance(body_sha, str) else None
        if match is None:
            raise InvalidInputError(f"invalid eval item body digest: {body_sha!r}")
        hex_part = match.group(1)
        return f"{self._s3_prefix}eval-items/{hex_part[:2]}/{hex_part}.json"

    def _put_once(self, key: str, text: str) -> None:
        data = text.encode("utf-8")
        if not self._objects.put_if_absent(key, data, _JSON) and self._objects.get(key) != data:
            raise InvalidInputError(f"s3://{self._objects.bucket}/{key} holds different bytes")

    def _read_json(self, key: str, what: str) -> Any:
        data = self._objects.get(key)
        if data is None:
            raise NotFoundError(f"no {what} in s3://{self._objects.bucket}/{key}")
        try:
            return json.loads(data)
        except ValueError as exc:
            where = f"s3://{self._objects.bucket}/{key}"
            raise InvalidInputError(f"{where}: not JSON ({exc})") from None


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
