"""Validation findings and the error that carries them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from little_dist.errors import InvalidInputError

__all__ = [
    "UNIMPLEMENTED_FIELD_CODE",
    "Finding",
    "LwirValidationError",
    "error",
    "unimplemented_field",
]

#: The one code for "the schema accepts this field, the alpha runtime does not implement it".
UNIMPLEMENTED_FIELD_CODE = "schema.unimplemented_field"

# field -> (what an author believes it turns on, what to do instead). Upstream feeds the
# message back to its planner as repair context, so the advice is phrased as an instruction.
_UNIMPLEMENTED_FIELDS: dict[str, tuple[str, str]] = {
    "permissions.secrets": (
        "a secret allowlist for the run",
        "Remove `permissions.secrets` (or leave it as an empty array). Alpha has no secret "
        "broker: pass secrets to the tools you expose to the workflow instead.",
    ),
    "permissions.network": (
        "a network egress allowlist for the run",
        "Remove `permissions.network` (or leave it as an empty array). Alpha does not gate "
        "egress: confine network access to the tools you expose to the workflow instead.",
    ),
    "onFailure.repair.mode=escalate": (
        "output repair on a stronger model than the step's own",
        'Set `onFailure.repair.mode` to "self". Escalated repair is deferred; to repair on a '
        "different model today, run the step on that model.",
    ),
    "onFailure.repair.model": (
        "the model slot the repair pass runs on",
        "Remove `onFailure.repair.model`. Self-repair always re-runs the step's own "
        "`with.model`; to repair on a different model, run the step on that model.",
    ),
    "steps[].cache": (
        "memoization of the step result",
        "Remove `cache` from the step. Alpha has no step cache; re-running a workflow replays "
        "recorded steps from the run log instead.",
    ),
}


@dataclass(frozen=True, slots=True)
class Finding:
    """One validation problem: an upstream ``code`` at a JSON ``path`` (``$.steps[0].id``)."""

    severity: Literal["error", "warning"]
    code: str
    path: str
    message: str

    def to_json(self) -> dict[str, str]:
        """The wire form upstream uses: ``{severity, code, path, message}``."""
        return {
            "severity": self.severity,
            "code": self.code,
            "path": self.path,
            "message": self.message,
        }

    def __str__(self) -> str:
        return f"{self.path}: {self.code}: {self.message}"


def error(code: str, path: str, message: str) -> Finding:
    """An error-severity finding (every finding upstream emits today is an error)."""
    return Finding("error", code, path, message)


def unimplemented_field(field: str, path: str) -> Finding:
    """The finding for a declared-but-unimplemented field: loud now rather than ignored later."""
    declares, instead = _UNIMPLEMENTED_FIELDS[field]
    return error(
        UNIMPLEMENTED_FIELD_CODE,
        path,
        f"`{field}` declares {declares}, but the alpha runtime does not implement it — it "
        "would be accepted and then silently ignored, so it is rejected instead. "
        f"{instead}",
    )


class LwirValidationError(InvalidInputError):
    """An LWIR document failed validation; ``findings`` lists every problem found."""

    def __init__(self, findings: Sequence[Finding]) -> None:
        self.findings: tuple[Finding, ...] = tuple(findings)
        lines = "\n".join(f"  {item}" for item in self.findings)
        super().__init__(f"Invalid LWIR document ({len(self.findings)} findings):\n{lines}")
