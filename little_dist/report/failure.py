"""Why a run failed, in three parts a person reads: the cause code, the message, the step.

``RunFailed`` carries the error that ended the run (upstream's payload: ``error`` with
``causeCode``, ``message``, ``name``) but not the step it came from; the folded state knows
which steps failed. :func:`run_failure` puts the two together. Pure: no IO.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from little_dist.run_state import RunState

__all__ = ["RunFailure", "run_failure"]


@dataclass(frozen=True)
class RunFailure:
    """A failed run's reason: ``cause`` (the causeCode, e.g. ``tool_error``, ``cancelled``),
    ``message``, and ``step``, the path of the step whose failure ended the run (``None``
    when no step failed: a cancel, a planning failure, an engine error)."""

    cause: str | None
    message: str
    step: str | None

    def to_json(self) -> dict[str, Any]:
        return {"causeCode": self.cause, "message": self.message, "stepPath": self.step}

    def line(self) -> str:
        """``tool_error in step only: tool 'explode' failed: kaput``"""
        head = self.cause or "failed"
        if self.step is not None:
            head += f" in step {self.step}"
        return f"{head}: {self.message}" if self.message else head


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def run_failure(state: RunState) -> RunFailure | None:
    """The reason ``state``'s run failed; ``None`` unless it failed."""
    if state.status != "failed":
        return None
    error = state.error if isinstance(state.error, Mapping) else {}
    cause = _text(error.get("causeCode"))
    message = _text(error.get("message")) or _text(error.get("name")) or ""
    return RunFailure(cause, " ".join(message.split()), _failed_step(state, error))


def _failed_step(state: RunState, error: Mapping[str, Any]) -> str | None:
    """The step whose failure ended the run: the first failed step (in run order) whose last
    attempt failed with the run's error; else the first failed step. A branch's step fails
    before its parallel step does, so the deepest one comes first. (An error that names its
    step, ``stepPath``, is taken at its word.)"""
    path = _text(error.get("stepPath"))
    if path is not None:
        return path
    failed = [step for step in state.steps.values() if step.status == "failed"]
    for step in failed:
        last = step.error
        if isinstance(last, Mapping) and (
            last.get("message") == error.get("message")
            and last.get("causeCode") == error.get("causeCode")
        ):
            return step.step_path
    return failed[0].step_path if failed else None
