"""What a run's log says of its sub-runs and of its steps waiting for them (engine extension).

Folded from three engine events (see :mod:`little_dist.subruns`): ``little.subrun.started``
and ``little.subrun.ended`` (the parent's log names its children and their ends) and
``little.step.suspended`` (an attempt that ended waiting for children, ``waitingFor``), plus
``parentRunId`` of ``RunStarted`` (a child's link to its parent). Not part of upstream's
JSON. Immutable: the fold replaces a :class:`SubRunView` when one of those events changes it
(they are few per run).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

__all__ = ["EMPTY_SUB_RUNS", "STEP_SUSPENDED", "SUB_RUN_ENDED", "SUB_RUN_STARTED", "SubRunView"]

#: The engine events this view folds (their payloads are described in little_dist.subruns).
SUB_RUN_STARTED: Final = "little.subrun.started"
SUB_RUN_ENDED: Final = "little.subrun.ended"
STEP_SUSPENDED: Final = "little.step.suspended"


@dataclass(frozen=True)
class SubRunView:
    """A run's sub-run links: ``parent_run_id`` (``None`` unless another run started it),
    ``started`` (children named by ``little.subrun.started``, in order), ``ended`` (children
    with a ``little.subrun.ended``) and ``suspended`` (step paths whose suspended attempt
    still waits for a child)."""

    parent_run_id: str | None = None
    #: The parent's step whose tool call started this run (``parentStepPath``).
    parent_step_path: str | None = None
    started: tuple[str, ...] = ()
    ended: frozenset[str] = frozenset()
    suspended: frozenset[str] = field(default_factory=frozenset)

    @property
    def open_children(self) -> tuple[str, ...]:
        """Children started and not (yet) recorded as ended: what a cancel must stop."""
        return tuple(child for child in self.started if child not in self.ended)


EMPTY_SUB_RUNS: Final = SubRunView()
