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

Path safety when publishing: only regular files are published (a symlink, a device, a FIFO
or a socket the command made is skipped, and said so in :attr:`Changes.skipped`); files are
opened without following links; a path over :data:`MAX_PATH_BYTES` bytes, more than
``max_files`` files or more than ``max_bytes`` bytes in all fail the attempt with
:class:`ScratchLimitError`.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from little_dist.errors import InvalidInputError
from little_dist.events import EventInput
from little_dist.sandbox.mounts import Mount
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
        self._folder = tempfile.TemporaryDirectory(prefix="little-scratch-")
        root = Path(self._folder.name)
        root.chmod(0o755)
        self.own = _folder(root / "own")
        self._mounts = [Mount(self.own, OWN, writable=True)]
        for role in ("from-planner", "from-orchestrator"):
            self._mounts.append(Mount(_folder(root / role), f"/mnt/scratch/{role}"))
        for peer, peer_files in sorted(files.items()):
            if peer == step_path or not peer_files or "/" in peer or peer in (".", ".."):
                continue
            folder = _folder(root / "peer-steps" / peer)
            self._write(folder, peer_files)
            self._mounts.append(Mount(folder, f"{_PEERS}/{peer}"))
        self._write(self.own, self._started)
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
        self._folder.cleanup()

    def __enter__(self) -> AttemptScratch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, folder: Path, files: Mapping[str, ScratchFile]) -> None:
        for relative, file in files.items():
            data = self._world.get_artifact(file.artifact_ref).payload
            path = folder / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            _open_up(folder, path.parent)
            path.write_bytes(data if isinstance(data, bytes) else str(data).encode())
            path.chmod(0o755 if file.executable else 0o644)

    def _scan(self, changes: Changes) -> dict[str, tuple[bytes, bool]]:
        found: dict[str, tuple[bytes, bool]] = {}
        total = 0
        for top, folders, names in os.walk(self.own, followlinks=False):
            linked = [f for f in folders if os.path.islink(os.path.join(top, f))]
            for name in sorted(names) + linked:
                path = os.path.join(top, name)
                relative = os.path.relpath(path, self.own)
                if len(relative.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
                    raise ScratchLimitError(
                        f"scratch file {relative[:60]!r}...: path over {MAX_PATH_BYTES} bytes"
                    )
                mode = os.lstat(path).st_mode
                if not stat.S_ISREG(mode):
                    changes.skipped.append(f"{relative} ({_kind(mode)}, not published)")
                    continue
                data = _read_no_follow(path)
                total += len(data)
                if len(found) >= self.max_files or total > self.max_bytes:
                    raise ScratchLimitError(
                        f"scratch of step '{self.step_path}' is over its limit "
                        f"({self.max_files} files, {self.max_bytes} bytes)"
                    )
                found[relative] = (data, bool(mode & stat.S_IXUSR))
        return found


def _folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    return path


def _open_up(root: Path, folder: Path) -> None:
    while folder != root and root in folder.parents:
        folder.chmod(0o755)
        folder = folder.parent


def _read_no_follow(path: str) -> bytes:
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(descriptor, "rb") as file:
        return file.read()


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"
