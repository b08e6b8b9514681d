"""One attempt's scratch: its folders made from the World, and its changes to publish.

:class:`AttemptScratch` materializes, in a private temporary folder,

* ``own/`` — the step's own files as of its last completed attempt (writable; mounted at
  ``/mnt/scratch/own``);
* ``peer-steps/<step>/`` — each other completed step's files (read-only, at
  ``/mnt/scratch/peer-steps/<step>/``);
* ``from-planner/`` and ``from-orchestrator/`` — what the planner and the orchestrator left
  (read-only; empty until those roles write scratch);

reading each file's bytes from the World by the ``artifactRef`` its file event names (so a
step on another machine sees them). :meth:`AttemptScratch.changes` compares ``own/`` with what
it started from and returns the file events and artifacts to commit with the attempt: only
changed files are stored, content-addressed (an unchanged file costs nothing). Nothing is
published unless the attempt commits, so a killed attempt's writes are never seen by its
peers. :meth:`AttemptScratch.snapshot` and :meth:`~AttemptScratch.restore` carry ``own/``
across a replay (:mod:`~little_dist.scratch.snapshots`): what the recorded commands of a
retried attempt wrote is there again when its live part goes on.

Path safety: ``own/`` is written by the command, so the host touches it only through
:mod:`little_dist.sandbox.writable` (never following a link, reading only regular files,
walking without recursion). Only regular files are published (a symlink, a device, a FIFO,
a socket, or a name that is not UTF-8 is skipped, and said so in :attr:`Changes.skipped`);
a path over :data:`MAX_PATH_BYTES` bytes, folders deeper than
:data:`~little_dist.sandbox.writable.MAX_DEPTH`, more than ``max_files`` files or more than
``max_bytes`` bytes in all fail the attempt with :class:`ScratchLimitError`. The attempt's
folders are removed however deep the command made them.
"""

from __future__ import annotations

import hashlib
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from little_dist.errors import InvalidInputError
from little_dist.events import EventInput
from little_dist.sandbox.mounts import Mount
from little_dist.sandbox.writable import UnsafeEntryError, WritableFolder, remove_tree
from little_dist.scratch.files import OWN, ScratchFile, file_event
from little_dist.scratch.snapshots import OwnSnapshots
from little_dist.world.artifacts import artifact_ref_for
from little_dist.world.base import ArtifactInput, World

__all__ = ["MAX_PATH_BYTES", "AttemptScratch", "Changes", "ScratchLimitError"]

MAX_PATH_BYTES: Final = 1024
_PEERS: Final = "/mnt/scratch/peer-steps"


class ScratchLimitError(InvalidInputError):
    """An attempt's scratch is over a limit (files, bytes, path length)."""


@dataclass
class Changes:
    """What an attempt's ``own/`` changed: events and artifacts to commit with it."""

    events: list[EventInput] = field(default_factory=list)
    artifacts: list[ArtifactInput] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


class AttemptScratch:
    """The scratch folders of one attempt of ``step_path`` (see the module docstring)."""

    def __init__(
        self,
        world: World,
        run_id: str,
        step_path: str,
        attempt: int,
        files: Mapping[str, Mapping[str, ScratchFile]],
        *,
        max_files: int = 10_000,
        max_bytes: int = 256 * 1024 * 1024,
    ) -> None:
        self.run_id, self.step_path, self.attempt = run_id, step_path, attempt
        self.max_files, self.max_bytes = max_files, max_bytes
        self._world = world
        self._started = dict(files.get(step_path, {}))
        self._root = Path(tempfile.mkdtemp(prefix="little-scratch-"))
        try:
            self._root.chmod(0o755)
            self.own = _folder(self._root / "own")
            self._mounts = [Mount(self.own, OWN, writable=True)]
            for role in ("from-planner", "from-orchestrator"):
                self._mounts.append(Mount(_folder(self._root / role), f"/mnt/scratch/{role}"))
            for peer, peer_files in sorted(files.items()):
                if peer == step_path or not peer_files or "/" in peer or peer in (".", ".."):
                    continue
                folder = _folder(self._root / "peer-steps" / peer)
                self._write(folder, peer_files)
                self._mounts.append(Mount(folder, f"{_PEERS}/{peer}"))
            self._write(self.own, self._started)
        except BaseException:
            remove_tree(self._root)
            raise
        self._snapshots = OwnSnapshots(
            world,
            run_id,
            self.own,
            self._started,
            max_files=max_files,
            max_bytes=max_bytes,
            max_path_bytes=MAX_PATH_BYTES,
        )

    @property
    def mounts(self) -> list[Mount]:
        """The sandbox mounts: ``own`` writable, the rest read-only."""
        return list(self._mounts)

    def snapshot(self) -> dict[str, Any]:
        """The manifest of ``own/`` now, its files' bytes stored (recorded with a bash
        command's result; see :mod:`little_dist.scratch.snapshots`)."""
        return self._snapshots.snapshot()

    def restore(self, manifest: Mapping[str, Any]) -> None:
        """Make ``own/`` hold what a recorded :meth:`snapshot` says (a replayed session's)."""
        self._snapshots.restore(manifest)

    def changes(self) -> Changes:
        """The file events and artifacts that publish what ``own/`` changed."""
        changes = Changes()
        now = self._scan(changes)
        for relative, (data, executable) in sorted(now.items()):
            sha = "sha256:" + hashlib.sha256(data).hexdigest()
            before = self._started.get(relative)
            if before is not None and before.sha256 == sha and before.executable == executable:
                continue
            artifact = ArtifactInput(
                run_id=self.run_id,
                name=f"scratch/{sha[7:]}",
                payload=data,
                content_type="application/octet-stream",
            )
            after = ScratchFile(len(data), sha, artifact_ref_for(artifact), executable)
            changes.artifacts.append(artifact)
            kind = "created" if before is None else "updated"
            changes.events.append(
                file_event(kind, self.step_path, self.attempt, relative, before=before, after=after)
            )
        for relative in sorted(set(self._started) - set(now)):
            changes.events.append(
                file_event(
                    "deleted",
                    self.step_path,
                    self.attempt,
                    relative,
                    before=self._started[relative],
                )
            )
        return changes

    def close(self) -> None:
        remove_tree(self._root)

    def __enter__(self) -> AttemptScratch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, folder: Path, files: Mapping[str, ScratchFile]) -> None:
        with WritableFolder(folder) as writable:
            for relative, file in files.items():
                data = self._world.get_artifact(file.artifact_ref).payload
                writable.write(
                    relative,
                    data if isinstance(data, bytes) else str(data).encode(),
                    mode=0o755 if file.executable else 0o644,
                )

    def _scan(self, changes: Changes) -> dict[str, tuple[bytes, bool]]:
        found: dict[str, tuple[bytes, bool]] = {}
        total = 0
        with WritableFolder(self.own) as own:
            for entry in own.walk(error=ScratchLimitError):
                relative = entry.relative
                if len(relative.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
                    raise ScratchLimitError(
                        f"scratch file {relative[:60]!r}...: path over {MAX_PATH_BYTES} bytes"
                    )
                if entry.is_dir:
                    continue
                if not entry.utf8:
                    shown = relative.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                    changes.skipped.append(f"{shown} (a name that is not UTF-8, not published)")
                    continue
                if not entry.is_file:
                    changes.skipped.append(f"{relative} ({entry.kind}, not published)")
                    continue
                total += entry.info.st_size
                if len(found) >= self.max_files or total > self.max_bytes:
                    raise ScratchLimitError(
                        f"scratch of step '{self.step_path}' is over its limit "
                        f"({self.max_files} files, {self.max_bytes} bytes)"
                    )
                try:
                    data = entry.read(self.max_bytes - total + entry.info.st_size)
                except UnsafeEntryError as exc:  # it changed while read
                    raise ScratchLimitError(f"scratch file {relative[:60]!r}: {exc}") from None
                found[relative] = (data, bool(entry.info.st_mode & stat.S_IXUSR))
        return found


def _folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    return path
