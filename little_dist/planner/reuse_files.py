"""The reuse candidate's files, as upstream mounts them for the planner
(``materializePlannerReuseDetails`` in ``harness-workflow.ts``): one folder per candidate at
``/planner/reuse/<workflowVersionId>/``, read-only, holding the six files the review brief
names (:func:`~little_dist.planner.review.reuse_brief`):

``lwir.json``, ``lock.json``, ``planning-definition-snapshot.json``
    the candidate version's LWIR and lock, and the planning snapshot its run was planned
    under, each as canonical JSON and a newline (upstream's ``writePlannerReuseJson``);
``prior-input-summary.md``, ``prior-output-summary.md``, ``feedback-summary.md``
    upstream's three short notes (input hashes from the lock, the prior output on one line
    of at most 240 characters, "no structured feedback").

Upstream writes them under the run's log folder; here they are made afresh, from what the
world records, in a private temporary folder of the process that plans (a fleet's planner
worker or the in-process runner), bound read-only into the planner's bash sandbox and removed
when the planning session ends. The same candidate gives the same bytes, so a resumed session
(another worker) reads what the first one read.

Why the host can trust this folder: nothing but this module writes it, before any command
runs, and the sandbox only ever sees it read-only. Even so every file is created with
``O_EXCL | O_NOFOLLOW`` in a folder made here, so nothing could have been put in its way.
Candidate content is only ever file *content*: a version id that is not a plain name (a
separator, ``..``, a NUL, over 255 bytes) is never used as a folder name (the candidate is
then not mounted, and the planner is told so), and a file over :data:`MAX_FILE_BYTES` is
replaced by a note of its size and digest, so a huge LWIR cannot fill the worker's disk.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from little_dist.canonical import canonical_json
from little_dist.harness.bash_tool import BASH_TOOL, BashTool
from little_dist.harness.memo import Memo
from little_dist.planner.review import MOUNTED_ROOT, ReuseCandidate, planning_snapshot
from little_dist.sandbox import Mount
from little_dist.sandbox.bash_capabilities import BashCapabilities
from little_dist.sandbox.writable import remove_tree

if TYPE_CHECKING:
    from little_dist.harness.types import HarnessContext
    from little_dist.world.base import World

__all__ = [
    "DETAIL_FILES",
    "MAX_FILE_BYTES",
    "ReuseReader",
    "detail_files",
    "mounted_reuse_details",
    "safe_folder_name",
]

#: The files of one candidate's folder, in the brief's order.
DETAIL_FILES: Final = (
    "lwir.json",
    "lock.json",
    "planning-definition-snapshot.json",
    "prior-input-summary.md",
    "prior-output-summary.md",
    "feedback-summary.md",
)
#: The most one detail file holds; a larger one is replaced by a note of what it was.
MAX_FILE_BYTES: Final = 1024 * 1024
_SUMMARY_CHARS: Final = 240
_NAME: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}")


def safe_folder_name(version_id: str) -> bool:
    """Whether ``version_id`` can name a folder as it is: a plain name, no separator."""
    return bool(_NAME.fullmatch(version_id)) and version_id not in (".", "..")


def _json_file(value: Any) -> str:
    return canonical_json(value) + "\n"


def _summary_line(value: Any) -> str:
    """Upstream's ``summaryLine``: the canonical JSON, cut to 240 characters."""
    if value is None:
        return "not recorded"
    text = canonical_json(value)
    return text if len(text) <= _SUMMARY_CHARS else text[: _SUMMARY_CHARS - 3] + "..."


def detail_files(candidate: ReuseCandidate) -> dict[str, str]:
    """The six files' text (upstream's contents), by name."""
    version = candidate.version
    lock = version.lock
    snapshot = planning_snapshot(candidate.requested, lock)
    version_id = candidate.workflow_version_id
    return {
        "lwir.json": _json_file(version.lwir),
        "lock.json": _json_file(dict(lock)),
        "planning-definition-snapshot.json": _json_file(snapshot),
        "prior-input-summary.md": "\n".join(
            [
                "# Prior Input Summary",
                "",
                f"WorkflowVersion: {version_id}",
                f"Run: {candidate.run_id}",
                f"Input hash: {lock.get('inputHash') or 'unknown'}",
                f"Input structure hash: {lock.get('plannedInputStructureHash') or 'unknown'}",
                "",
            ]
        ),
        "prior-output-summary.md": "\n".join(
            [
                "# Prior Output Summary",
                "",
                f"WorkflowVersion: {version_id}",
                f"Run: {candidate.run_id}",
                f"Output: {_summary_line(candidate.prior_output)}",
                "",
            ]
        ),
        "feedback-summary.md": "\n".join(
            [
                "# Feedback Summary",
                "",
                "No structured feedback is attached to this candidate.",
                "",
            ]
        ),
    }


def _bounded(name: str, text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) <= MAX_FILE_BYTES:
        return data
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    return (
        f"[{name} is {len(data)} bytes, over the {MAX_FILE_BYTES}-byte limit of a planner "
        f"reuse file: not shown; its digest is {digest}]\n"
    ).encode()


def _write_new(folder_fd: int, name: str, data: bytes) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, 0o444, dir_fd=folder_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


@contextmanager
def mounted_reuse_details(
    candidates: tuple[ReuseCandidate, ...], *, root: str = MOUNTED_ROOT
) -> Iterator[Mount | None]:
    """The candidates' folders in a fresh private folder, as a read-only :class:`Mount` at
    ``root`` (``None`` when no candidate has a safe name); removed on exit."""
    safe = [c for c in candidates if safe_folder_name(c.workflow_version_id)]
    if not safe:
        yield None
        return
    base = Path(tempfile.mkdtemp(prefix="little-planner-reuse-"))
    try:
        # Read by the sandbox's user (another uid, as root): open for reading, never writing.
        base.chmod(0o755)
        top = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            for candidate in safe:
                name = candidate.workflow_version_id
                os.mkdir(name, 0o700, dir_fd=top)
                folder = os.open(
                    name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=top
                )
                try:
                    for file_name, text in detail_files(candidate).items():
                        _write_new(folder, file_name, _bounded(file_name, text))
                    os.fchmod(folder, 0o555)
                finally:
                    os.close(folder)
        finally:
            os.close(top)
        yield Mount(base, root, writable=False)
    finally:
        remove_tree(base)


class ReuseReader:
    """The planner's read-only bash over the mounted candidate files (upstream gives its
    planner a bash over its scratch and ``/planner/reuse``): one session per revision, its
    commands recorded as tool calls of the revision's recorder and replayed from them."""

    def __init__(self, world: World, run_id: str, mount: Mount | None) -> None:
        self.world, self.run_id, self.mount = world, run_id, mount

    def context(self, ctx: HarnessContext) -> tuple[HarnessContext, BashTool | None]:
        if self.mount is None:
            return ctx, None
        tool = BashTool(BashCapabilities(network=False), ctx.recorder, mounts=[self.mount])
        revision = ctx.recorder.attempt
        mine = [
            e for e in self.world.list_events(self.run_id) if e.payload.get("attempt") == revision
        ]
        memo = Memo.from_events(mine, ctx.recorder.step_path, world=self.world)
        return dataclasses.replace(ctx, tools={BASH_TOOL: tool}, memo=memo), tool
