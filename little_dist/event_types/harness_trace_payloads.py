"""Payloads of upstream's other harness events: runtime commands, files, artifacts, mounts,
persistent dirs, and the side-channel ``outcome.reported``.

little-harness records these (``events/names.ts``) next to the session, model and tool
events; its trace validator (``trace/validate.ts``) gives their shapes, which these models
follow: the fields it requires are required, nested records are typed where they are
simple, and extra fields are kept as everywhere else. Its cross-field checks (a file path
lies under its root, a mount's ``harnessDir`` matches its root) are not repeated here: a
reader should not refuse a log over them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from little_dist.event_types.base import (
    ErrorEnvelope,
    NonEmptyStr,
    NonNegativeInt,
    Number,
    Payload,
)

__all__ = [
    "ArtifactRef",
    "ClassificationReason",
    "FileBinary",
    "FileEntry",
    "HarnessArtifactCreatedPayload",
    "HarnessFileCreatedPayload",
    "HarnessFileDeletedPayload",
    "HarnessFileStagedFromHostPayload",
    "HarnessFileStagedFromMessagePayload",
    "HarnessFileUpdatedPayload",
    "HarnessFileWrittenByToolPayload",
    "HarnessFilesystemMountedPayload",
    "HarnessPersistentDirCommitFailedPayload",
    "HarnessPersistentDirCommitStartedPayload",
    "HarnessPersistentDirCommitSucceededPayload",
    "HarnessPersistentDirLoadedPayload",
    "HarnessRuntimeCommandDeniedPayload",
    "HarnessRuntimeCommandFailedPayload",
    "HarnessRuntimeCommandStartedPayload",
    "HarnessRuntimeCommandSucceededPayload",
    "HarnessRuntimeDisposeFailedPayload",
    "HarnessRuntimeErrorPayload",
    "HarnessRuntimeTierEscalatedPayload",
    "HarnessRuntimeTierUnavailablePayload",
    "OutcomeReportedPayload",
    "PersistentDirChangeCounts",
    "PersistentDirChanges",
    "TraceContentRef",
]

#: The harness's managed filesystem roots.
ManagedRoot = Literal["session", "artifacts", "persistent", "agents"]
CommitMode = Literal["after-turn", "manual", "read-only"]
AbsolutePath = Annotated[str, Field(pattern=r"^/")]
#: Upstream writes an error as an envelope or, from some runtimes, as a bare string.
ErrorValue = ErrorEnvelope | str


class TraceContentRef(Payload):
    """Captured text (a command's stdout, a tool's input): a preview and/or a stored ref."""

    captured: bool
    preview: str | None = None
    truncated: bool | None = None
    content_ref: str | None = None
    bytes: NonNegativeInt | None = None
    sha256: str | None = None
    media_type: NonEmptyStr | None = None
    redacted: bool | None = None
    redaction_reason: NonEmptyStr | None = None


class FileEntry(Payload):
    """One file or directory of a mount or a persistent-dir change."""

    path: NonEmptyStr
    kind: Literal["file", "directory"]
    bytes: NonNegativeInt | None = None
    sha256: str | None = None
    media_type: NonEmptyStr | None = None


class FileBinary(Payload):
    """A file's content by size and digest (before or after a change)."""

    bytes: NonNegativeInt
    sha256: NonEmptyStr


class ArtifactRef(Payload):
    """An artifact the harness stored under ``/artifacts``."""

    id: NonEmptyStr
    path: NonEmptyStr
    bytes: NonNegativeInt | None = None
    media_type: NonEmptyStr | None = None
    sha256: NonEmptyStr | None = None
    metadata: dict[str, Any] | None = None


class ClassificationReason(Payload):
    """Why the command classifier decided as it did; only ``kind`` is required."""

    kind: NonEmptyStr


# -- runtime commands ------------------------------------------------------------------------


class HarnessRuntimeCommandStartedPayload(Payload):
    command: NonEmptyStr
    cwd: str | None = None
    timeout_ms: Number | None = None


class _CommandFinished(Payload):
    command: NonEmptyStr
    exit_code: int
    duration_ms: Number
    stdout: TraceContentRef
    stderr: TraceContentRef
    error: ErrorValue | None = None


class HarnessRuntimeCommandSucceededPayload(_CommandFinished):
    pass


class HarnessRuntimeCommandFailedPayload(_CommandFinished):
    pass


class HarnessRuntimeCommandDeniedPayload(Payload):
    command: NonEmptyStr
    reasons: list[ClassificationReason]


class HarnessRuntimeTierEscalatedPayload(Payload):
    # ``from`` is a Python keyword: the field is ``from_`` and ``from`` on the wire.
    from_: NonEmptyStr = Field(validation_alias="from", serialization_alias="from")
    to: NonEmptyStr
    trigger: Literal["classification", "emulation-gap"]
    command: NonEmptyStr
    decision: Literal["run", "escalate", "deny"] | None = None
    reasons: list[ClassificationReason] | None = None
    gap: dict[str, Any] | None = None


class HarnessRuntimeTierUnavailablePayload(HarnessRuntimeTierEscalatedPayload):
    detail: NonEmptyStr


class HarnessRuntimeErrorPayload(Payload):
    error: ErrorValue


class HarnessRuntimeDisposeFailedPayload(HarnessRuntimeErrorPayload):
    """Turn teardown failed; upstream reports it in the runtime-error shape."""


# -- files and artifacts ---------------------------------------------------------------------


class _FileChange(Payload):
    path: AbsolutePath
    root: NonEmptyStr  # a managed root or a custom mount's label
    source: NonEmptyStr | None = None


class HarnessFileCreatedPayload(_FileChange):
    bytes: NonNegativeInt | None = None
    media_type: NonEmptyStr | None = None
    sha256: NonEmptyStr | None = None
    before: FileBinary | None = None
    after: FileBinary
    diff: dict[str, Any]


class HarnessFileUpdatedPayload(HarnessFileCreatedPayload):
    before: FileBinary


class HarnessFileWrittenByToolPayload(HarnessFileCreatedPayload):
    """A file a tool wrote: a creation or an update (``before`` present when it existed)."""


class HarnessFileDeletedPayload(_FileChange):
    before: FileBinary
    diff: dict[str, Any]


class _FileStaged(Payload):
    path: AbsolutePath
    root: ManagedRoot
    source: NonEmptyStr
    after: FileBinary


class HarnessFileStagedFromMessagePayload(_FileStaged):
    pass


class HarnessFileStagedFromHostPayload(_FileStaged):
    pass


class HarnessArtifactCreatedPayload(Payload):
    path: Annotated[str, Field(pattern=r"^/artifacts/")]
    artifact: ArtifactRef


# -- mounts and persistent dirs --------------------------------------------------------------


class HarnessFilesystemMountedPayload(Payload):
    root: ManagedRoot
    harness_dir: AbsolutePath
    source: Literal["session", "skill", "persistent_dir", "runtime"]
    writable: bool
    commit: CommitMode | None = None
    file_count: NonNegativeInt
    files: list[FileEntry]


class PersistentDirChangeCounts(Payload):
    created: NonNegativeInt
    updated: NonNegativeInt
    deleted: NonNegativeInt


class PersistentDirChanges(Payload):
    created: list[FileEntry]
    updated: list[FileEntry]
    deleted: list[FileEntry]


class _PersistentDir(Payload):
    harness_dir: Annotated[str, Field(pattern=r"^/persistent")]
    commit: CommitMode


class HarnessPersistentDirLoadedPayload(_PersistentDir):
    duration_ms: Number
    file_count: NonNegativeInt
    files: list[FileEntry]


class HarnessPersistentDirCommitStartedPayload(_PersistentDir):
    change_counts: PersistentDirChangeCounts
    changes: PersistentDirChanges


class HarnessPersistentDirCommitSucceededPayload(HarnessPersistentDirCommitStartedPayload):
    duration_ms: Number


class HarnessPersistentDirCommitFailedPayload(HarnessPersistentDirCommitSucceededPayload):
    error: ErrorEnvelope


# -- side channel ----------------------------------------------------------------------------


class OutcomeReportedPayload(Payload):
    """A verdict written onto a run after the fact by an observer (never a run input)."""

    status: Literal["success", "failure", "partial"]
    source: NonEmptyStr
    retracted: bool | None = None
    score: int | float | None = None
    detail: str | None = None
    reporter: NonEmptyStr | None = None
    report_key: NonEmptyStr | None = None
    step_path: NonEmptyStr | None = None
    prompt_hash: NonEmptyStr | None = None
