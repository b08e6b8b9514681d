"""What only some worlds do, each a named protocol beside the core
:class:`~little_dist.world.base.World`.

Every world keeps event logs, artifacts, leases and versions (``World``). Some do more:

==========================  ===================================================  ==============
protocol                    what it adds                                         who has it
==========================  ===================================================  ==============
:class:`Archives`           a finished run's log moved to an archive (S3)        RedisS3World
:class:`KeepsVersionParts`  a version's shared part stored once, by hash         RedisS3World
:class:`StartsInOneTrip`    a run's claim, start (and first tasks) in one trip   RedisS3World
:class:`RecordsSubmissions` answers to ``little.submit_run`` tasks               RedisS3World
:class:`SharesStorage`      its Redis and bucket, for stores that live beside it RedisS3World
:class:`InDataDir`          a data directory that stores can live under          LocalWorld
:class:`FencesInProcess`    a lease held while a body runs, in one process       Local, Memory
==========================  ===================================================  ==============

Each is ``runtime_checkable`` and asked with ``isinstance`` once per world
(:func:`extras_of`, cached per world object), never probed method by method with
``getattr`` on a hot path. Whoever needs an extra either takes the fallback way when the
world lacks it (a submit goes step by step, a finished run stays where it is) or raises
:class:`~little_dist.errors.InvalidInputError` naming the world and what it lacks
(:func:`require`).

:func:`chosen_store` is the one rule for where a world keeps a store that is not part of
``World`` (agent memory, outer-loop manifests): one on the world's Redis and bucket, else
one under its data directory, else one living as long as an in-process world. The stores'
packages build them (:mod:`little_dist.memory.worlds`, :mod:`little_dist.outer_loop.store`):
a world imports nothing of the layers above it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from little_dist.errors import InvalidInputError

if TYPE_CHECKING:
    from little_dist.events import Event, EventInput
    from little_dist.world.base import Fence, World
    from little_dist.world.defaults import PreparedEvent

__all__ = [
    "AnnouncesEnds",
    "Archives",
    "FencesInProcess",
    "InDataDir",
    "KeepsVersionParts",
    "RecordsSubmissions",
    "SharedStorage",
    "SharesStorage",
    "StartsInOneTrip",
    "WorldExtras",
    "chosen_store",
    "extras_of",
    "require",
]

_T = TypeVar("_T")
_P = TypeVar("_P")


@runtime_checkable
class Archives(Protocol):
    """A world that moves a finished run's log to an archive and lets its live copy go."""

    def archive_run(self, run_id: str, *, ttl_seconds: float | None = None) -> int:
        """Archive a run whose log holds its end; how many events were archived."""
        ...

    def has_archive(self, run_id: str) -> bool:
        """Whether the run is archived (a run id given by a caller may name one)."""
        ...

    def list_unarchived_run_ids(self) -> list[str]:
        """The runs whose archive has not completed (what a scheduler may still sweep)."""
        ...


@runtime_checkable
class KeepsVersionParts(Protocol):
    """A world that stores what runs of a workflow share once, named by its hash."""

    def put_version_part(self, body: str) -> str:
        """Store ``body`` (put-if-absent); its ref."""
        ...

    def get_version_part(self, ref: str) -> str:
        """The body stored under ``ref``; :class:`~little_dist.errors.NotFoundError` else."""
        ...


@runtime_checkable
class StartsInOneTrip(KeepsVersionParts, Archives, Protocol):
    """A world that claims a submission and records a run's start in one atomic step (see
    ``RedisS3World.start_submission``); with its fleet's broker on the same Redis, the
    first tasks go with it (``start_and_send``)."""

    def start_submission(
        self,
        run_id: str,
        input_hash: str,
        events: Sequence[EventInput | PreparedEvent],
        *,
        signal: bool = True,
        fresh: bool = False,
    ) -> tuple[str, list[Event], bool]: ...

    def start_submissions(
        self,
        starts: Sequence[tuple[str, str, Sequence[EventInput | PreparedEvent]]],
        *,
        signal: bool = True,
        fresh: bool = False,
    ) -> list[str | None]: ...

    def start_and_send(
        self,
        run_id: str,
        input_hash: str,
        events: Sequence[EventInput | PreparedEvent],
        sends: Sequence[tuple[str, str, str, str, str]],
        *,
        holder: str,
        lease_ttl_seconds: float,
        active_runs: str,
        fresh: bool,
    ) -> int | str: ...


@runtime_checkable
class RecordsSubmissions(Protocol):
    """A world that keeps the answer to each ``little.submit_run`` task for its sender."""

    def record_acceptance(self, task_id: str | None, run_id: str) -> None: ...

    def record_refusal(
        self, task_id: str | None, run_id: str | None, cause: str, message: str
    ) -> bool: ...


@runtime_checkable
class AnnouncesEnds(Protocol):
    """A world that announces every run's end on a stream a process can follow (a fleet
    worker's attempts are told to stop when their run ends: ``fleet/end_watch.py``)."""

    def read_ends(self, after: str | None, block_ms: int) -> tuple[str, list[str]]: ...


@dataclass(frozen=True)
class SharedStorage:
    """What a world on Redis and S3 lends the stores that live beside it: its clients, its
    key and object prefixes, its lease key names (a store's fenced commits are checked
    against the world's leases) and its clock argument for Lua scripts."""

    redis: Any
    s3: Any
    key_prefix: str
    s3_prefix: str
    lease_key: Callable[[str], str]
    now_ms: Any


@runtime_checkable
class SharesStorage(Protocol):
    """A world whose Redis and bucket hold other stores too (agent memory, outer-loop
    manifests), each built by its own package from :class:`SharedStorage`."""

    def shared_storage(self) -> SharedStorage: ...


@runtime_checkable
class InDataDir(Protocol):
    """A world in a data directory, under which other stores can live too."""

    data_dir: Path


@runtime_checkable
class FencesInProcess(Protocol):
    """A world of one process that runs ``body`` while ``fence``'s lease is held."""

    def while_fenced(self, fence: Fence, body: Callable[[], _T]) -> _T: ...


@dataclass(frozen=True)
class WorldExtras:
    """The extras of one world (``None``: it has not that one), found by :func:`extras_of`."""

    archives: Archives | None
    version_parts: KeepsVersionParts | None
    one_trip_starts: StartsInOneTrip | None
    submission_records: RecordsSubmissions | None
    end_announcements: AnnouncesEnds | None


_found: weakref.WeakKeyDictionary[Any, WorldExtras] = weakref.WeakKeyDictionary()
_found_lock = threading.Lock()


def extras_of(world: World) -> WorldExtras:
    """``world``'s extras, asked with ``isinstance`` the first time and remembered for as
    long as the world object lives (a look-up afterwards: cheap on a hot path)."""
    try:
        known = _found.get(world)
    except TypeError:  # (an object that cannot be weakly referenced: asked every time)
        return _extras(world)
    if known is None:
        known = _extras(world)
        with _found_lock:
            _found[world] = known
    return known


def _extras(world: World) -> WorldExtras:
    return WorldExtras(
        archives=world if isinstance(world, Archives) else None,
        version_parts=world if isinstance(world, KeepsVersionParts) else None,
        one_trip_starts=world if isinstance(world, StartsInOneTrip) else None,
        submission_records=world if isinstance(world, RecordsSubmissions) else None,
        end_announcements=world if isinstance(world, AnnouncesEnds) else None,
    )


def require(world: object, extra: type[_P], what: str) -> _P:
    """``world`` as ``extra``, or :class:`InvalidInputError` saying that this kind of world
    does not do ``what``."""
    if not isinstance(world, extra):
        raise InvalidInputError(f"{type(world).__name__} does not {what}")
    return world


_in_process: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
_in_process_lock = threading.Lock()


def chosen_store(
    world: World,
    *,
    what: str,
    own: Callable[[], _T] | None,
    in_data_dir: Callable[[Path], _T],
    in_process: Callable[[], _T],
) -> _T:
    """The store of ``what`` (e.g. ``"memory stores"``) for ``world``: ``own()`` when the
    world lends its storage (the caller passes it after its ``isinstance``), else
    ``in_data_dir(world.data_dir)`` for a world in a data directory, else one made by
    ``in_process()`` for an in-process world (``MemoryWorld``), the same one for as long as
    that world object lives. :class:`InvalidInputError` for any other world."""
    if own is not None:
        return own()
    if isinstance(world, InDataDir):
        return in_data_dir(world.data_dir)
    from little_dist.world.in_process import MemoryWorld

    if not isinstance(world, MemoryWorld):
        raise InvalidInputError(f"{type(world).__name__} keeps no {what}")
    with _in_process_lock:
        held = _in_process.setdefault(world, {})
        if what not in held:
            held[what] = in_process()
        store: _T = held[what]
    return store
