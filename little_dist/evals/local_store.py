"""Eval sets, item bodies and eval run results of a LocalWorld, in its data directory, as
upstream's ``eval-set-store.ts`` lays them out (the :class:`~little_dist.evals.store.EvalStore`
of a world in a data directory):

    eval-sets/<evset_id>.json                  the registered version, canonical JSON + "\\n"
    eval-items/<2 hex>/<bodySha hex>.json      a body, canonical JSON + "\\n"
    eval-runs/<evset_id>/<ns>-<hex>.json       what ``little eval run`` found (ours: the
                                               newest is what the next run compares with)

Bundles and bodies are content-addressed and written once (a temporary file, synced, then
linked into place): writing the same bytes again is a no-op, different bytes under the same
address an error. A body is re-hashed on every read.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path
from typing import Any, Final

from little_dist.canonical import canonical_json, sha256_digest
from little_dist.errors import InvalidInputError, NotFoundError
from little_dist.evals.bundle import EvalSetVersion

__all__ = ["LocalEvalStore"]

_EVAL_SET_ID = re.compile(r"evset_[A-Za-z0-9_-]{1,80}")
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
_MAX_FILE_BYTES: Final = 64 << 20


class LocalEvalStore:
    """The eval sets of a local world at ``data_dir``."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.root = Path(data_dir)
        self.where = str(self.root)

    # -- bundles ----------------------------------------------------------------------------

    def put_eval_set(self, version: EvalSetVersion) -> None:
        _write_once(self._set_path(version.id), canonical_json(version.to_json()) + "\n")

    def get_eval_set(self, eval_set_id: str) -> dict[str, Any]:
        """The stored version (``{id, hash, canonicalizer, canonicalJson, bundle}``), its
        hash checked against its bundle."""
        path = self._set_path(eval_set_id)
        stored = _read_json(path, f"eval set {eval_set_id}")
        if not isinstance(stored, dict) or sha256_digest(stored.get("bundle")) != stored.get(
            "hash"
        ):
            raise InvalidInputError(f"{path}: the stored eval set does not match its hash")
        return stored

    def eval_set_ids(self) -> list[str]:
        folder = self.root / "eval-sets"
        names = sorted(os.listdir(folder)) if folder.is_dir() else []
        return [n[:-5] for n in names if n.endswith(".json") and _EVAL_SET_ID.fullmatch(n[:-5])]

    def known_lineages(self) -> set[str]:
        """Workflow names this world has seen: eval sets' ``workflowName`` and stored
        workflow versions' ``metadata.name``."""
        names: set[str] = set()
        for eval_set_id in self.eval_set_ids():
            try:
                names.add(self.get_eval_set(eval_set_id)["bundle"]["manifest"]["workflowName"])
            except (InvalidInputError, NotFoundError, KeyError, TypeError):
                continue  # (a file we cannot read establishes no lineage)
        versions = self.root / "versions"
        for name in sorted(os.listdir(versions)) if versions.is_dir() else []:
            try:
                document = json.loads((versions / name).read_text("utf-8"))
                names.add(document["lwir"]["metadata"]["name"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return names

    # -- bodies -----------------------------------------------------------------------------

    def put_body(self, body_sha: str, canonical: str) -> None:
        _write_once(self._body_path(body_sha), canonical + "\n")

    def get_body(self, body_sha: str) -> Any:
        body = _read_json(self._body_path(body_sha), f"eval item body {body_sha}")
        actual = sha256_digest(body)
        if actual != body_sha:
            raise InvalidInputError(
                f"stored eval item body hashes to {actual}, not to its address {body_sha}"
            )
        return body

    # -- runs -------------------------------------------------------------------------------

    def put_run(self, eval_set_id: str, stamp: str, result: dict[str, Any]) -> str:
        folder = self.root / "eval-runs" / self._set_path(eval_set_id).stem
        path = folder / f"{stamp}-{secrets.token_hex(4)}.json"
        _write_once(path, json.dumps(result, ensure_ascii=False, sort_keys=True) + "\n")
        return str(path)

    def last_run(self, eval_set_id: str) -> dict[str, Any] | None:
        """The newest stored result of running ``eval_set_id``, if any."""
        folder = self.root / "eval-runs" / self._set_path(eval_set_id).stem
        names = (
            sorted(n for n in os.listdir(folder) if n.endswith(".json")) if folder.is_dir() else []
        )
        if not names:
            return None
        found = _read_json(folder / names[-1], "the last eval run")
        return found if isinstance(found, dict) else None

    # -- paths ------------------------------------------------------------------------------

    def _set_path(self, eval_set_id: str) -> Path:
        if not isinstance(eval_set_id, str) or not _EVAL_SET_ID.fullmatch(eval_set_id):
            raise InvalidInputError(f"invalid eval set id: {eval_set_id!r}")
        return self.root / "eval-sets" / f"{eval_set_id}.json"

    def _body_path(self, body_sha: str) -> Path:
        match = _DIGEST.fullmatch(body_sha) if isinstance(body_sha, str) else None
        if match is None:
            raise InvalidInputError(f"invalid eval item body digest: {body_sha!r}")
        hex_part = match.group(1)
        return self.root / "eval-items" / hex_part[:2] / f"{hex_part}.json"


def _read_json(path: Path, what: str) -> Any:
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise NotFoundError(f"no {what} in {path.parent}") from None
    if len(data) > _MAX_FILE_BYTES:
        raise InvalidInputError(f"{path}: larger than {_MAX_FILE_BYTES} bytes")
    try:
        return json.loads(data)
    except ValueError as exc:
        raise InvalidInputError(f"{path}: not JSON ({exc})") from None


def _write_once(path: Path, text: str) -> None:
    """Put-if-absent by ``link``: readers never see a partial file, and a second writer of
    the same bytes succeeds silently."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")
    data = text.encode("utf-8")
    try:
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temp, path)
        except FileExistsError:
            if path.read_bytes() != data:
                raise InvalidInputError(f"{path} already holds different bytes") from None
    finally:
        temp.unlink(missing_ok=True)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
