"""One attempt's memory: its mounts made from the World's stores, its writes published at commit.

:class:`AttemptMemory` copies, into a private temporary folder, each store the step sees
(:func:`~little_dist.memory.layout.workflow_memory_mounts`) as it is when the attempt's first
command runs, and remembers every path's version. The sandbox binds each folder at its mount
path, writable only for an ``rw`` store (the kernel refuses a write to a read-only one:
"Read-only file system"). Nothing the commands do is visible to anyone until
:meth:`AttemptMemory.publish`, which the runtime calls when the attempt completes: it compares
each writable folder with what it started from and commits the differences to the store,
each made from the version the attempt saw, so a concurrent writer's update is never
overwritten (:mod:`little_dist.memory.store`). A killed or failed attempt publishes nothing.

What publishing returns are events for the attempt's commit: upstream's
``harness.file.created`` / ``updated`` / ``deleted`` with ``root`` ``"memory"`` (plus the
``store`` and the new ``version``) for each change that landed, and
``little.memory.conflict`` for each that did not land where it was made: its bytes kept at
``conflictPath`` (``notes.conflict-<writer>.md``), or, for a delete of a file someone changed
meanwhile, the newer file left in place (``outcome`` ``"delete-dropped"``).

Replay. A bash command's record carries :meth:`AttemptMemory.snapshot`: for each ``rw`` store,
the manifest of its folder after the command (every file's digest, its bytes stored through
the World as ``memory/<sha256>``, by :class:`~little_dist.scratch.snapshots.OwnSnapshots`)
and ``base``, the version of every path the attempt started from. A retried attempt that
replays the command (it does not run again) takes both up (:meth:`AttemptMemory.restore`)
before its first live command or its commit: the folder holds the recorded files, and the
versions its publish is made from are the recorded ones, so the commit is the one the first
attempt would have made. A writer that committed to a path in between is never overwritten
silently: the replayed change comes from the older version, so it loses (a conflict copy, or a
dropped delete), as a concurrent write does. The restored folder is the one the recorded
session saw: a file another writer created or changed meanwhile is not shown to the retry's
live commands, nor published over (it is not among the attempt's changes).

Only regular files are published: a symlink, a FIFO, a socket, a device or a name that is not
UTF-8 the commands made is skipped (:attr:`Published.skipped` names each); the host reads and
writes the folders only through :mod:`little_dist.sandbox.writable` (the commands can write
them: no link is followed, no recursion); a path over
:data:`~little_dist.memory.store.MAX_MEMORY_PATH_BYTES` bytes, folders too deep, or more than
``max_files`` files or ``max_bytes`` bytes in one store, fails the attempt
(:class:`MemoryLimitError`).
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from little_dist.errors import InvalidInputError
from little_dist.event_types.engine import MEMORY_CONFLICT_EVENT as CONFLICT_EVENT
from little_dist.events import EventInput
from little_dist.memory.layout import MemoryMountSpec
from little_dist.memory.store import (
    MAX_MEMORY_PATH_BYTES,
    MemoryChange,
    MemoryEntry,
    MemoryPathError,
    MemoryStore,
    check_memory_path,
)
from little_dist.occurrences import harness_event
from little_dist.sandbox.mounts import Mount
from little_dist.sandbox.writable import UnsafeEntryError, WritableFolder, remove_tree
from little_dist.scratch.snapshots import OwnSnapshots

if TYPE_CHECKING:
    from little_dist.world.base import Fence, World

__all__ = ["CONFLICT_EVENT", "MEMORY_ROOT_LABEL", "AttemptMemory", "MemoryLimitError", "Published"]

MEMORY_ROOT_LABEL: Final = "memory"


class MemoryLimitError(InvalidInputError):
    """An attempt's memory writes are over a limit (files, bytes, path length)."""


@dataclass
class Published:
    """What :meth:`AttemptMemory.publish` did: events for the commit, entries it skipped."""

    events: list[EventInput] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


@dataclass
class _Mounted:
    spec: MemoryMountSpec
    folder: Path
    started: dict[str, MemoryEntry]
    snapshots: OwnSnapshots | None = None


class AttemptMemory:
    """The memory mounts of one attempt (see the module docstring); :meth:`close` it."""

    def __init__(
        self,
        store: MemoryStore,
        specs: Sequence[MemoryMountSpec],
        *,
        step_path: str,
        attempt: int,
        writer: str,
        max_files: int = 10_000,
        max_bytes: int = 64 * 1024 * 1024,
        world: World | None = None,
        run_id: str = "",
    ) -> None:
        self.step_path, self.attempt, self.writer = step_path, attempt, writer
        self.max_files, self.max_bytes = max_files, max_bytes
        self._store = store
        self._root = root = Path(tempfile.mkdtemp(prefix="little-memory-"))
        self._mounted: list[_Mounted] = []
        try:
            root.chmod(0o755)
            self._mount_all(specs, world, run_id)
        except BaseException:
            remove_tree(root)
            raise

    def _mount_all(
        self, specs: Sequence[MemoryMountSpec], world: World | None, run_id: str
    ) -> None:
        store, root = self._store, self._root
        max_files, max_bytes = self.max_files, self.max_bytes
        for index, spec in enumerate(specs):
            folder = root / str(index)
            folder.mkdir(mode=0o755)
            folder.chmod(0o755)
            entries = dict(store.entries(spec.store_id))
            with WritableFolder(folder) as writable:
                for path, entry in sorted(entries.items()):
                    if entry.exists and _safe(path):
                        writable.write(path, store.read(spec.store_id, entry))
            mounted = _Mounted(spec, folder, entries)
            if world is not None and spec.mode == "rw":
                mounted.snapshots = OwnSnapshots(
                    world,
                    run_id,
                    folder,
                    {},
                    max_files=max_files,
                    max_bytes=max_bytes,
                    max_path_bytes=MAX_MEMORY_PATH_BYTES,
                    name="memory",
                    label=f"of store {spec.store_id}",
                    limit_error=MemoryLimitError,
                )
            self._mounted.append(mounted)

    @property
    def mounts(self) -> list[Mount]:
        """The sandbox mounts: writable for an ``rw`` store, read-only otherwise."""
        return [Mount(m.folder, m.spec.target, writable=m.spec.mode == "rw") for m in self._mounted]

    def publish(
        self, *, still_held: Callable[[], bool] = lambda: True, fence: Fence | None = None
    ) -> Published:
        """Commit what the commands changed in every writable store; the events that say so.
        ``still_held`` is asked right before each store's commit: False (the attempt lost its
        lease meanwhile) publishes nothing more. ``fence`` (the attempt's step lease) makes
        each commit conditional on that lease, atomically: a zombie attempt's commit is
        refused with :class:`~little_dist.errors.LeaseLostError`, nothing of it stored."""
        published = Published()
        pending = [(m, self._changes(m, published)) for m in self._mounted if m.spec.mode == "rw"]
        for mounted, changes in pending:
            if not changes or not still_held():
                continue
            applied = self._store.commit(
                mounted.spec.store_id, changes, writer=self.writer, fence=fence
            )
            for change, result in zip(changes, applied, strict=True):
                published.events.extend(self._events(mounted, change, result))
        return published

    def snapshot(self) -> dict[str, Any]:
        """Each ``rw`` store's folder now and the versions it started from, by store id,
        its files' bytes stored (recorded with a bash command: see the module docstring).
        Empty when the attempt was made without a World."""
        found: dict[str, Any] = {}
        for mounted in self._mounted:
            if mounted.snapshots is None:
                continue
            base = {
                path: [entry.version, entry.sha256, entry.size]
                for path, entry in sorted(mounted.started.items())
                if _safe(path)  # a path no folder can hold is never written or deleted
            }
            found[mounted.spec.store_id] = {**mounted.snapshots.snapshot(), "base": base}
        return found

    def restore(self, recorded: Mapping[str, Any]) -> None:
        """Take up a recorded :meth:`snapshot`: each ``rw`` store it names gets the recorded
        files, and publishes from the recorded versions."""
        for mounted in self._mounted:
            manifest = recorded.get(mounted.spec.store_id)
            if mounted.snapshots is None or manifest is None:
                continue
            base = manifest.get("base") if isinstance(manifest, Mapping) else None
            if not isinstance(base, Mapping):
                raise InvalidInputError(
                    f"recorded memory of store {mounted.spec.store_id}: expected 'base'"
                )
            started: dict[str, MemoryEntry] = {}
            for path, entry in base.items():
                if not (isinstance(entry, list) and len(entry) == 3 and _safe(str(path))):
                    raise InvalidInputError(
                        f"recorded memory of store {mounted.spec.store_id}: bad base entry "
                        f"{str(path)[:80]!r}"
                    )
                version, sha, size = entry
                digest = None if sha is None else str(sha)
                started[path] = MemoryEntry(path, int(version), digest, int(size))
            mounted.snapshots.restore(manifest)
            mounted.started = started

    def close(self) -> None:
        remove_tree(self._root)

    def __enter__(self) -> AttemptMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _changes(self, mounted: _Mounted, published: Published) -> list[MemoryChange]:
        now = _scan(mounted, published, self.max_files, self.max_bytes)
        changes: list[MemoryChange] = []
        for path, data in sorted(now.items()):
            before = mounted.started.get(path)
            sha = "sha256:" + hashlib.sha256(data).hexdigest()
            if before is not None and before.sha256 == sha:
                continue
            changes.append(MemoryChange(path, 0 if before is None else before.version, data))
        for path, before in sorted(mounted.started.items()):
            if before.exists and path not in now and _safe(path):
                changes.append(MemoryChange(path, before.version, None))
        return changes

    def _events(self, mounted: _Mounted, change: MemoryChange, result: Any) -> list[EventInput]:
        spec = mounted.spec
        before = mounted.started.get(change.path)
        shown = f"{spec.mount_path}{change.path}"
        common = {"root": MEMORY_ROOT_LABEL, "source": "memory", "store": spec.store_id}
        common["stepPath"] = self.step_path
        if result.outcome in ("written", "deleted"):
            kind = (
                "deleted"
                if change.data is None
                else ("updated" if before is not None and before.exists else "created")
            )
            payload: dict[str, Any] = {
                "path": shown,
                **common,
                "diff": {},
                "version": result.version,
            }
            if before is not None and before.exists:
                payload["before"] = {"bytes": before.size, "sha256": before.sha256}
            if change.data is not None:
                payload["after"] = {"bytes": result.size, "sha256": result.sha256}
                payload["bytes"] = result.size
            occurrence = harness_event(
                f"memory-{kind}", self.step_path, self.attempt, spec.store_id, change.path
            )
            return [
                EventInput(type=f"harness.file.{kind}", occurrence_id=occurrence, payload=payload)
            ]
        if result.outcome == "unchanged":
            return []
        conflict: dict[str, Any] = {
            **common,
            "path": shown,
            "attempt": self.attempt,
            "writer": self.writer,
            "baseVersion": change.base,
            "currentVersion": result.current,
        }
        if result.outcome == "conflict":
            conflict["outcome"] = "kept-as-copy"
            conflict["conflictPath"] = f"{spec.mount_path}{result.conflict_path}"
        else:
            conflict["outcome"] = "delete-dropped"
        occurrence = harness_event(
            "memory-conflict", self.step_path, self.attempt, spec.store_id, change.path
        )
        return [EventInput(type=CONFLICT_EVENT, occurrence_id=occurrence, payload=conflict)]


def _safe(path: str) -> bool:
    try:
        check_memory_path(path)
    except MemoryPathError:
        return False
    return True


def _scan(
    mounted: _Mounted, published: Published, max_files: int, max_bytes: int
) -> dict[str, bytes]:
    """Every regular file of a mounted store's folder, read through
    :mod:`little_dist.sandbox.writable` (the command wrote it): anything else is skipped."""
    found: dict[str, bytes] = {}
    total = 0
    with WritableFolder(mounted.folder) as folder:
        for entry in folder.walk(error=MemoryLimitError):
            relative = entry.relative
            shown = f"{mounted.spec.mount_path}{relative}"
            if not entry.utf8:
                shown = shown.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                published.skipped.append(f"{shown} (a name that is not UTF-8, not published)")
                continue
            if len(relative.encode("utf-8")) > MAX_MEMORY_PATH_BYTES:
                raise MemoryLimitError(
                    f"memory file {shown[:80]!r}...: path over {MAX_MEMORY_PATH_BYTES} bytes"
                )
            if entry.is_dir:
                continue
            if not entry.is_file:
                published.skipped.append(f"{shown} ({entry.kind}, not published)")
                continue
            if not _safe(relative):
                published.skipped.append(f"{shown} (a name a store cannot keep, not published)")
                continue
            total += entry.info.st_size
            if len(found) >= max_files or total > max_bytes:
                raise MemoryLimitError(
                    f"memory store {mounted.spec.store_id} is over its limit ({max_files} "
                    f"files, {max_bytes} bytes)"
                )
            try:
                found[relative] = entry.read(max_bytes - total + entry.info.st_size)
            except UnsafeEntryError as exc:  # it changed while read
                raise MemoryLimitError(f"memory file {shown[:80]!r}: {exc}") from None
    return found
