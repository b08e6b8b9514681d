"""Which scratch files each step has, read from the run's log: pure, no IO.

A step attempt that completes publishes what changed in its ``/mnt/scratch/own`` as
upstream's file events (``harness.file.created`` / ``updated`` / ``deleted``, ``root``
``"scratch"``), each carrying the file's ``after`` size and digest and, beyond upstream's
fields, the ``artifactRef`` its bytes are stored under. Folding those events, in log order,
gives every step's files as of its last completed attempt: what a peer step sees under
``/mnt/scratch/peer-steps/<step>/`` and what the step's next visit starts from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from little_dist.events import Event, EventInput
from little_dist.occurrences import harness_event

__all__ = [
    "FILE_EVENTS",
    "OWN",
    "SCRATCH_ROOT",
    "ScratchFile",
    "file_event",
    "scratch_files",
]

#: Where a step's own scratch is mounted, and the label its file events carry.
OWN: Final = "/mnt/scratch/own"
SCRATCH_ROOT: Final = "scratch"
FILE_EVENTS: Final = ("harness.file.created", "harness.file.updated", "harness.file.deleted")


@dataclass(frozen=True, slots=True)
class ScratchFile:
    """One file of a step's scratch: its size, digest and where its bytes are stored."""

    size: int
    sha256: str
    artifact_ref: str
    executable: bool = False


def scratch_files(events: Iterable[Event]) -> dict[str, dict[str, ScratchFile]]:
    """Step path -> relative path -> file, from the scratch file events of ``events``."""
    steps: dict[str, dict[str, ScratchFile]] = {}
    for event in events:
        if event.type not in FILE_EVENTS:
            continue
        payload = event.payload
        if payload.get("root") != SCRATCH_ROOT or not isinstance(payload.get("stepPath"), str):
            continue
        path = payload.get("path")
        if not isinstance(path, str) or not path.startswith(OWN + "/"):
            continue
        files = steps.setdefault(payload["stepPath"], {})
        relative = path[len(OWN) + 1 :]
        if event.type == "harness.file.deleted":
            files.pop(relative, None)
        else:
            after = payload.get("after") or {}
            files[relative] = ScratchFile(
                size=int(after.get("bytes", 0)),
                sha256=str(after.get("sha256", "")),
                artifact_ref=str(payload.get("artifactRef", "")),
                executable=bool(payload.get("executable", False)),
            )
    return steps


def file_event(
    kind: str,
    step_path: str,
    attempt: int,
    relative: str,
    *,
    before: ScratchFile | None = None,
    after: ScratchFile | None = None,
) -> EventInput:
    """The event that publishes one change (``created``, ``updated`` or ``deleted``)."""
    payload: dict[str, Any] = {
        "path": f"{OWN}/{relative}",
        "root": SCRATCH_ROOT,
        "source": "scratch",
        "stepPath": step_path,
        "diff": {},
    }
    if before is not None:
        payload["before"] = _binary(before)
    if after is not None:
        payload["after"] = _binary(after)
        payload["bytes"] = after.size
        payload["artifactRef"] = after.artifact_ref
        if after.executable:
            payload["executable"] = True
    return EventInput(
        type=f"harness.file.{kind}",
        occurrence_id=harness_event(f"file-{kind}", step_path, attempt, relative),
        payload=payload,
    )


def _binary(file: ScratchFile) -> Mapping[str, Any]:
    return {"bytes": file.size, "sha256": file.sha256}
