"""Where eval sets live: the :class:`EvalStore` protocol, and the store of each kind of World.

An eval set is kept in the world the other commands use (``--world``, ``LITTLE_WORLD``,
``--data-dir``), so a fleet's eval sets and their results live beside its runs:

* a world in a data directory (``LocalWorld``, the embedded default): upstream's files,
  ``eval-sets/`` and ``eval-items/`` under it (:mod:`.local_store`), plus our ``eval-runs/``;
* a world on Redis and S3 (``RedisS3World``): the same documents as immutable S3 objects,
  content-addressed, and a small Redis index of set ids and each set's runs
  (:mod:`.redis_s3_store`);
* ``MemoryWorld`` (unit tests): the local store in a temporary folder that lives as long as
  the world.

The choice is :func:`~little_dist.world.extras.chosen_store`'s, as for memory stores and
outer-loop manifests. Bundles and bodies are written once: the same bytes again are a no-op,
different bytes under one address an :class:`~little_dist.errors.InvalidInputError`; a body
is re-hashed on every read.
"""

from __future__ import annotations

import tempfile
from typing import Any, Protocol

from little_dist.evals.bundle import EvalSetVersion
from little_dist.evals.local_store import LocalEvalStore
from little_dist.world.base import World
from little_dist.world.extras import SharesStorage, chosen_store

__all__ = ["EvalStore", "eval_store_for"]


class EvalStore(Protocol):
    """The eval sets, item bodies and eval run results of one World."""

    #: where the store is, for messages (a folder, or a bucket and prefix)
    where: str

    def put_eval_set(self, version: EvalSetVersion) -> None: ...

    def get_eval_set(self, eval_set_id: str) -> dict[str, Any]:
        """The stored version (``{id, hash, canonicalizer, canonicalJson, bundle}``), its
        hash checked; :class:`~little_dist.errors.NotFoundError` when there is none."""
        ...

    def eval_set_ids(self) -> list[str]: ...

    def known_lineages(self) -> set[str]:
        """Workflow names the world has seen (for upstream's lineage warnings)."""
        ...

    def put_body(self, body_sha: str, canonical: str) -> None: ...

    def get_body(self, body_sha: str) -> Any: ...

    def put_run(self, eval_set_id: str, stamp: str, result: dict[str, Any]) -> str:
        """Keep one eval run's result (``stamp``: sortable, newest last); where it is."""
        ...

    def last_run(self, eval_set_id: str) -> dict[str, Any] | None: ...


def eval_store_for(world: World) -> EvalStore:
    """The eval sets of ``world`` (see the module docstring);
    :class:`~little_dist.errors.InvalidInputError` for a World that keeps none."""
    store: EvalStore = chosen_store(
        world,
        what="eval sets",
        own=(lambda: _on_shared_storage(world)) if isinstance(world, SharesStorage) else None,
        in_data_dir=LocalEvalStore,
        in_process=_scratch_store,
    )
    return store


def _on_shared_storage(world: SharesStorage) -> EvalStore:
    from little_dist.evals.redis_s3_store import RedisS3EvalStore

    shared = world.shared_storage()
    return RedisS3EvalStore(
        shared.redis, shared.s3, key_prefix=shared.key_prefix, s3_prefix=shared.s3_prefix
    )


class _ScratchStore(LocalEvalStore):
    """A local store in a temporary folder that lives as long as the store object."""

    def __init__(self) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="little-evals-")
        super().__init__(self._folder.name)


def _scratch_store() -> EvalStore:
    return _ScratchStore()
