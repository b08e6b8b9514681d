"""What a writable folder held after each recorded bash command, so a replayed session finds it
again: ``own/`` of the run scratch, and each read-write memory store's working folder.

A bash command's result is recorded (``harness.tool_call.succeeded``) and a retried attempt,
or a resumed session on any worker, replays it from the log instead of running it again. The
files the command wrote were in the attempt's private folder, which died with the attempt: so
with each recorded command goes an *own-tree manifest*, every regular file of ``own/`` after
the command by relative path (``bytes``, ``sha256``, ``artifactRef``, ``executable``), each
file's bytes stored through the World's artifact store, content-addressed like the files a
commit publishes (``scratch/<sha256>``, the same refs: a file stored here costs nothing when
the attempt commits it). Before a replayed session's first live command, or its commit when
none follows, ``own/`` is made to match the last replayed command's manifest
(:meth:`OwnSnapshots.restore`). The same machinery keeps an attempt's read-write memory
folders (:mod:`little_dist.memory.attempt`): ``name`` ``"memory"`` stores their bytes as
``memory/<sha256>`` and names a memory limit in its errors.

Nothing here publishes: the stored bytes are named only by the tool call's record, which no
peer reads; a step's files become visible to others only with its commit
(:mod:`little_dist.scratch.attempt`). Scanning follows the publish rules (regular files
only, through :mod:`little_dist.sandbox.writable`, the same limits); a file whose size, mtime
and inode are unchanged since the last scan is not read or hashed again.
"""

from __future__ import annotations

import hashlib
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from little_dist.errors import InvalidInputError
from little_dist.sandbox.writable import Entry, UnsafeEntryError, WritableFolder
from little_dist.scratch.files import ScratchFile
from little_dist.world.artifacts import artifact_ref_for
from little_dist.world.base import ArtifactInput, World

__all__ = ["OwnSnapshots", "manifest_files"]

_Seen = tuple[int, int, int]  # size, mtime_ns, inode
_MODE_BITS: Final = 0o755


class OwnSnapshots:
    """Manifests of one writable folder, ``own/`` or a memory store's (see the module
    docstring).

    ``known`` are files already in the World (the step's files as of its last completed
    attempt): their bytes are not stored again. ``max_files``, ``max_bytes`` and
    ``max_path_bytes`` bound a scan as they bound a publish; ``name`` prefixes the stored
    bytes' artifact names, ``label`` names the folder in errors, and ``limit_error`` makes
    the error a scan over a bound raises (the scratch's
    :class:`~little_dist.scratch.attempt.ScratchLimitError` by default).
    """

    def __init__(
        self,
        world: World,
        run_id: str,
        own: Path,
        known: Mapping[str, ScratchFile],
        *,
        max_files: int,
        max_bytes: int,
        max_path_bytes: int,
        name: str = "scratch",
        label: str | None = None,
        limit_error: Callable[[str], Exception] | None = None,
    ) -> None:
        self._world, self._run_id, self._own = world, run_id, own
        self._name, self._limit_error = name, limit_error
        self._label = label if label is not None else f"{own.name}/"
        self._limits = (max_files, max_bytes, max_path_bytes)
        self._stored = {file.sha256: file.artifact_ref for file in known.values()}
        self._seen: dict[str, tuple[_Seen, ScratchFile]] = {}

    def snapshot(self) -> dict[str, Any]:
        """The manifest of ``own/`` now, every file's bytes stored first."""
        limit_error = self._limit_error
        if limit_error is None:
            from little_dist.scratch.attempt import ScratchLimitError

            limit_error = ScratchLimitError
        max_files, max_bytes, max_path_bytes = self._limits
        files: dict[str, ScratchFile] = {}
        total = 0
        with WritableFolder(self._own) as own:
            for entry in own.walk(error=limit_error):
                relative = entry.relative
                if len(relative.encode("utf-8", "surrogateescape")) > max_path_bytes:
                    raise limit_error(
                        f"{self._name} file {relative[:60]!r}...: path over {max_path_bytes} bytes"
                    )
                if not entry.is_file or not entry.utf8:
                    continue  # folders; links, devices, FIFOs, odd names: never published
                total += entry.info.st_size
                if len(files) >= max_files or total > max_bytes:
                    raise limit_error(
                        f"{self._name} folder {self._label} is over its limit "
                        f"({max_files} files, {max_bytes} bytes)"
                    )
                try:
                    files[relative] = self._file(entry, max_bytes - total + entry.info.st_size)
                except UnsafeEntryError as exc:  # it changed while read
                    raise limit_error(f"{self._name} file {relative[:60]!r}: {exc}") from None
        self._seen = {k: v for k, v in self._seen.items() if k in files}
        return {"files": {relative: _to_json(file) for relative, file in files.items()}}

    def restore(self, manifest: Mapping[str, Any]) -> None:
        """Make ``own/`` hold exactly the files of ``manifest`` (a :meth:`snapshot`)."""
        files = manifest_files(manifest)
        self._seen.clear()
        with WritableFolder(self._own) as own:
            own.clear()
            for relative, file in sorted(files.items()):
                data = self._world.get_artifact(file.artifact_ref, run_id=self._run_id).payload
                own.write(
                    relative,
                    data if isinstance(data, bytes) else str(data).encode(),
                    mode=_MODE_BITS if file.executable else 0o644,
                )
                self._stored[file.sha256] = file.artifact_ref

    def _file(self, entry: Entry, limit: int) -> ScratchFile:
        relative, info = entry.relative, entry.info
        seen: _Seen = (info.st_size, info.st_mtime_ns, info.st_ino)
        executable = bool(info.st_mode & stat.S_IXUSR)
        cached = self._seen.get(relative)
        if cached is not None and cached[0] == seen:
            file = cached[1]
            if file.executable != executable:
                file = ScratchFile(file.size, file.sha256, file.artifact_ref, executable)
                self._seen[relative] = (seen, file)
            return file
        data = entry.read(limit)
        sha = "sha256:" + hashlib.sha256(data).hexdigest()
        ref = self._stored.get(sha)
        if ref is None:
            artifact = ArtifactInput(
                run_id=self._run_id,
                name=f"{self._name}/{sha[7:]}",
                payload=data,
                content_type="application/octet-stream",
            )
            ref = self._world.put_artifact(artifact).artifact_ref
            assert ref == artifact_ref_for(artifact)  # the ref a publish of it names
            self._stored[sha] = ref
        file = ScratchFile(len(data), sha, ref, executable)
        self._seen[relative] = (seen, file)
        return file


def manifest_files(manifest: Mapping[str, Any]) -> dict[str, ScratchFile]:
    """The files a recorded manifest names, each path checked to stay inside ``own/``."""
    files = manifest.get("files")
    if not isinstance(files, Mapping):
        raise InvalidInputError("own-tree manifest: expected an object with 'files'")
    found: dict[str, ScratchFile] = {}
    for relative, entry in files.items():
        parts = str(relative).split("/")
        if (
            not isinstance(entry, Mapping)
            or "\0" in relative
            or any(part in ("", ".", "..") for part in parts)
        ):
            raise InvalidInputError(f"own-tree manifest: bad entry {str(relative)[:80]!r}")
        found[relative] = ScratchFile(
            size=int(entry.get("bytes", 0)),
            sha256=str(entry.get("sha256", "")),
            artifact_ref=str(entry.get("artifactRef", "")),
            executable=bool(entry.get("executable", False)),
        )
    return found


def _to_json(file: ScratchFile) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "bytes": file.size,
        "sha256": file.sha256,
        "artifactRef": file.artifact_ref,
    }
    if file.executable:
        entry["executable"] = True
    return entry
