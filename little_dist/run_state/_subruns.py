"""What a run's log says of its sub-runs and of its steps waiting for them (engine extension).

Folded from three engine events (see :mod:`little_dist.subruns`): ``little.subrun.started``
and ``little.subrun.ended`` (the parent's log names its children and their ends) and
``little.step.suspended`` (an attempt that ended waiting for children, ``waitingFor``; with
``resumeOn: "any"`` it waits for the first of them to end, without it for all), plus
``parentRunId`` of ``RunStarted`` (a child's link to its parent). Not part of upstream's
JSON. A :class:`SubRunView` is immutable (a snapshot's); the fold keeps a mutable
:class:`SubRunLinks` while it folds, each event an O(1) change (a parent of 1,000 children
folds their 1,000 starts and ends in linear time), and makes the view from it once per
snapshot that follows a change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

# The engine events this view folds (their payloads are described in little_dist.subruns).
from little_dist.event_types.engine import (
    APPROVAL_DECIDED,
    STEP_SUSPENDED,
    SUB_RUN_ENDED,
    SUB_RUN_STARTED,
)

__all__ = [
    "APPROVAL_DECIDED",
    "EMPTY_SUB_RUNS",
    "STEP_SUSPENDED",
    "SUB_RUN_ENDED",
    "SUB_RUN_STARTED",
    "SubRunLinks",
    "SubRunView",
]


@dataclass(frozen=True)
class SubRunView:
    """A run's sub-run links: ``parent_run_id`` (``None`` unless another run started it),
    ``started`` (children named by ``little.subrun.started``, in order), ``ended`` (children
    with a ``little.subrun.ended``, and approvals with a ``little.approval.decided``: what a
    suspended step may wait for), ``suspended`` (step paths whose suspended attempt
    still waits for a child) and ``resume_on_any`` (those of them that are due again at the
    first of their children's end: suspended with ``resumeOn: "any"``)."""

    parent_run_id: str | None = None
    #: The parent's step whose tool call started this run (``parentStepPath``).
    parent_step_path: str | None = None
    started: tuple[str, ...] = ()
    ended: frozenset[str] = frozenset()
    suspended: frozenset[str] = field(default_factory=frozenset)
    resume_on_any: frozenset[str] = field(default_factory=frozenset)

    @property
    def open_children(self) -> tuple[str, ...]:
        """Children started and not (yet) recorded as ended: what a cancel must stop."""
        return tuple(child for child in self.started if child not in self.ended)


EMPTY_SUB_RUNS: Final = SubRunView()


class SubRunLinks:
    """What a fold knows of a run's sub-run links while it folds (mutable, owned by one
    builder): the view's fields, as a list and sets, and per suspended step the children
    it still waits for. :meth:`view` is the immutable :class:`SubRunView`, made again only
    after a change; :attr:`changed_steps` the steps whose waiting set changed since the
    builder last copied them into its steps."""

    __slots__ = (
        "_view",
        "changed_steps",
        "ended",
        "parent_run_id",
        "parent_step_path",
        "resume_on_any",
        "started",
        "started_set",
        "waiting",
    )

    def __init__(self, view: SubRunView, waiting: dict[str, set[str]]) -> None:
        self.parent_run_id = view.parent_run_id
        self.parent_step_path = view.parent_step_path
        self.started: list[str] = list(view.started)
        self.started_set: set[str] = set(view.started)
        self.ended: set[str] = set(view.ended)
        #: Step path -> the children its suspended attempt still waits for (never empty).
        self.waiting = waiting
        #: The waiting steps that are due again at the first of their children's end.
        self.resume_on_any: set[str] = set(view.resume_on_any)
        self.changed_steps: set[str] = set()
        self._view: SubRunView | None = view

    def changed(self) -> None:
        """The view must be made again."""
        self._view = None

    def stop_waiting(self, path: str) -> None:
        """``path`` waits for no child any more (resumed, or due again)."""
        if self.waiting.pop(path, None) is not None:
            self.changed()
        if path in self.resume_on_any:
            self.resume_on_any.discard(path)
            self.changed()

    def child_ended(self, child: str) -> None:
        """Take ``child`` off every waiting step: a step waiting for all its children is
        due once the last one ended, one suspended with ``resumeOn: "any"`` at the first."""
        done: list[str] = []
        for path, waiting in self.waiting.items():
            if child in waiting:
                waiting.discard(child)
                self.changed_steps.add(path)
                if not waiting or path in self.resume_on_any:
                    done.append(path)
        for path in done:
            self.stop_waiting(path)

    def view(self) -> SubRunView:
        view = self._view
        if view is None:
            view = self._view = SubRunView(
                parent_run_id=self.parent_run_id,
                parent_step_path=self.parent_step_path,
                started=tuple(self.started),
                ended=frozenset(self.ended),
                suspended=frozenset(self.waiting),
                resume_on_any=frozenset(self.resume_on_any),
            )
        return view
