"""The read side of a materialized run: :class:`RunState` and what it holds.

These objects are snapshots. Their attributes are read-only properties over private slots;
only :class:`~little_dist.run_state.RunStateBuilder` (same package) writes the slots, and it
copies an object before changing one that a snapshot already holds (copy-on-write), so a
:class:`RunState` never changes after it is returned.

Values that come from event payloads (outputs, errors, metadata) are the payload objects
themselves, not copies: treat them as read-only, as upstream deep-freezes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, Literal, TypeAlias

from little_dist.pricing import UsageTotals
from little_dist.run_state._budget import BudgetLedger
from little_dist.run_state._journal import StepJournal
from little_dist.run_state._parallel import ParallelGroupState, parallel_view
from little_dist.run_state._subruns import SubRunView
from little_dist.run_state._usage import Pricer, Totals, empty_totals, totals_json

__all__ = [
    "RUN_ENDED",
    "RunState",
    "RunStatus",
    "StepAttempt",
    "StepState",
    "StepStatus",
]

RunStatus: TypeAlias = Literal["pending", "running", "completed", "failed"]
#: The statuses of a run that is over (its log holds ``RunCompleted`` or ``RunFailed``):
#: ``state.status in RUN_ENDED``.
RUN_ENDED: Final[tuple[RunStatus, ...]] = ("completed", "failed")
#: ``suspended``: an attempt that ended waiting for sub-runs (``little.step.suspended``); its
#: step stays ``running`` until an attempt after it ends (engine extension).
StepStatus: TypeAlias = Literal["pending", "running", "completed", "failed", "suspended"]


class _Absent:
    """Marks a field that JavaScript would leave ``undefined`` (absent, not ``null``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<absent>"


ABSENT: Final = _Absent()


def _usage_model(totals: Totals) -> UsageTotals:
    return UsageTotals.model_validate(totals_json(totals))


class _RecordsError:
    """``error`` as recorded: an absent key and an explicit ``null`` are told apart."""

    __slots__ = ()
    _error: Any

    @property
    def has_error(self) -> bool:
        return self._error is not ABSENT

    @property
    def error(self) -> Any:
        """The recorded error (may be ``None`` when the event said ``null``); see has_error."""
        return None if self._error is ABSENT else self._error


class _RecordsOutput(_RecordsError):
    """``output`` as recorded: ``"output" in payload`` semantics, as upstream."""

    __slots__ = ()
    _output: Any

    @property
    def has_output(self) -> bool:
        """True when the event carried an ``output`` key (even ``null``)."""
        return self._output is not ABSENT

    @property
    def output(self) -> Any:
        return None if self._output is ABSENT else self._output


class StepAttempt(_RecordsError):
    """One attempt of a step; immutable (the fold replaces it rather than editing it)."""

    __slots__ = ("_attempt_id", "_born_ended", "_error", "_finished_at", "_started_at", "_status")

    def __init__(
        self,
        attempt_id: str,
        started_at: str,
        finished_at: str | None,
        status: StepStatus,
        error: Any = ABSENT,
        *,
        born_ended: bool = False,
    ) -> None:
        self._attempt_id = attempt_id
        self._started_at = started_at
        self._finished_at = finished_at
        self._status = status
        self._error = error
        #: Made by its end (no StepAttemptStarted before it): upstream then lays out its
        #: JSON ``finishedAt`` before ``status`` (the key order of its object literal).
        self._born_ended = born_ended

    @property
    def attempt_id(self) -> str:
        """``attemptId``"""
        return self._attempt_id

    @property
    def started_at(self) -> str:
        """``startedAt`` (recordedAt)"""
        return self._started_at

    @property
    def finished_at(self) -> str | None:
        """``finishedAt`` or None"""
        return self._finished_at

    @property
    def status(self) -> StepStatus:
        """running, completed or failed"""
        return self._status

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"attemptId": self._attempt_id, "startedAt": self._started_at}
        if self._born_ended and self._finished_at is not None:
            data["finishedAt"] = self._finished_at
        data["status"] = self._status
        if self._finished_at is not None and not self._born_ended:
            data["finishedAt"] = self._finished_at
        if self._error is not ABSENT:
            data["error"] = self._error
        return data

    def __repr__(self) -> str:
        return f"StepAttempt({self._attempt_id!r}, {self._status!r})"


class StepState(_RecordsOutput):
    """The folded state of one step path (one visit of one step, or one branch step)."""

    __slots__ = (
        "_artifact_refs",
        "_attempts",
        "_error",
        "_metadata",
        "_output",
        "_output_ref",
        "_path",
        "_status",
        "_usage",
        "_waiting",
    )

    def __init__(self, path: str) -> None:
        self._path = path
        self._status: StepStatus = "pending"
        self._usage: Totals = empty_totals()
        self._attempts: list[StepAttempt] = []
        self._output: Any = ABSENT
        self._output_ref: str | None = None
        self._artifact_refs: list[str] = []
        self._metadata: dict[str, Any] | None = None
        self._error: Any = ABSENT
        self._waiting: frozenset[str] = frozenset()

    def _copy(self) -> StepState:
        clone = StepState.__new__(StepState)
        clone._path = self._path
        clone._status = self._status
        clone._usage = self._usage.copy()
        clone._attempts = self._attempts.copy()
        clone._output = self._output
        clone._output_ref = self._output_ref
        clone._artifact_refs = self._artifact_refs.copy()
        clone._metadata = self._metadata
        clone._error = self._error
        clone._waiting = self._waiting
        return clone

    @property
    def waiting_for(self) -> frozenset[str]:
        """The sub-runs the step's suspended last attempt still waits for (empty when it
        waits for none, or its last attempt is not suspended); engine extension."""
        return self._waiting

    @property
    def step_path(self) -> str:
        """``stepPath``"""
        return self._path

    @property
    def status(self) -> StepStatus:
        """pending, running, completed or failed"""
        return self._status

    @property
    def output_ref(self) -> str | None:
        """``outputRef`` or None"""
        return self._output_ref

    @property
    def metadata(self) -> dict[str, Any] | None:
        """``metadata`` of StepCompleted"""
        return self._metadata

    @property
    def attempts(self) -> tuple[StepAttempt, ...]:
        return tuple(self._attempts)

    @property
    def artifact_refs(self) -> tuple[str, ...]:
        return tuple(self._artifact_refs)

    @property
    def usage(self) -> UsageTotals:
        """Tokens and dollars of the model calls recorded with this ``stepPath``."""
        return _usage_model(self._usage)

    def to_json(self) -> dict[str, Any]:
        """Upstream's ``MaterializedStepState`` JSON (undefined fields absent)."""
        data: dict[str, Any] = {
            "stepPath": self._path,
            "status": self._status,
            "usage": totals_json(self._usage),
            "attempts": [attempt.to_json() for attempt in self._attempts],
            "artifactRefs": list(self._artifact_refs),
        }
        if self._output is not ABSENT:
            data["output"] = self._output
        if self._output_ref is not None:
            data["outputRef"] = self._output_ref
        if self._metadata is not None:
            data["metadata"] = self._metadata
        if self._error is not ABSENT:
            data["error"] = self._error
        return data

    def __repr__(self) -> str:
        return f"StepState({self._path!r}, {self._status!r}, attempts={len(self._attempts)})"


class RunState(_RecordsOutput):
    """A run's state, folded from its event log (upstream's ``MaterializedRunState``).

    Build one with :func:`~little_dist.run_state.materialize_run_state`, extend it with
    :func:`~little_dist.run_state.fold_events`, serialize it with :meth:`to_json`.
    """

    __slots__ = (
        "_artifacts",
        "_budget_usd",
        "_error",
        "_event_count",
        "_finished_at",
        "_held",
        "_journal",
        "_journal_len",
        "_ledger",
        "_output",
        "_output_ref",
        "_parallel",
        "_pricer",
        "_run_id",
        "_started_at",
        "_status",
        "_steps",
        "_sub_runs",
        "_usage",
        "_workflow_version_id",
    )

    # Instances are made by the builder, which fills every slot.
    _run_id: str
    _status: RunStatus
    _workflow_version_id: str | None
    _started_at: str | None
    _finished_at: str | None
    _output: Any
    _output_ref: str | None
    _usage: Totals
    _steps: dict[str, StepState]
    _artifacts: list[str]
    _error: Any
    _event_count: int
    _parallel: dict[str, ParallelGroupState]
    _pricer: Pricer  # where the fold's rates came from; fold_events continues with it
    _sub_runs: SubRunView
    _journal: StepJournal
    _journal_len: int
    _budget_usd: float | None
    _held: dict[str, float]
    _ledger: BudgetLedger

    @property
    def budget_usd(self) -> float | None:
        """The run's dollar ceiling (``little.run.budget``), or ``None`` without one."""
        return self._budget_usd

    @property
    def spent_usd(self) -> float:
        """What the run's priced model calls cost (the usage total; 0 before any)."""
        cost = self._usage[4]
        return float(cost) if cost is not None else 0.0

    @property
    def reserved_usd(self) -> float:
        """The worst-case cost held by budgeted model calls sent and not yet ended (a call
        whose worker died mid-call stays held: never forgotten, at its worst case)."""
        return sum(self._held.values())

    @property
    def budget_parent_run_id(self) -> str | None:
        """The parent run whose budget this run borrows from (a sub-run of a budgeted run,
        :mod:`little_dist.budget_tree`), or ``None``."""
        return self._ledger.parent

    @property
    def budget_tree(self) -> bool:
        """Whether the run's model calls are budgeted: its own ceiling or its parent's."""
        return self._budget_usd is not None or self._ledger.parent is not None

    @property
    def drawn_usd(self) -> float:
        """What the run borrowed from its parent's budget (``little.budget.drawn``)."""
        return self._ledger.drawn

    @property
    def sub_runs_usd(self) -> float:
        """What the run's budgeted children count against it: each one's final spend once
        it ended, else what the run lent it (``little.budget.lent``)."""
        return self._ledger.sub_runs_usd()

    @property
    def committed_usd(self) -> float:
        """Everything counted against the run's budget: what it spent (a budgeted call it
        cannot price at its worst case), what its calls in flight hold, and its children."""
        ledger = self._ledger
        return self.spent_usd + ledger.unpriced + self.reserved_usd + ledger.sub_runs_usd()

    @property
    def run_id(self) -> str:
        """``runId``"""
        return self._run_id

    @property
    def status(self) -> RunStatus:
        """pending, running, completed or failed"""
        return self._status

    @property
    def workflow_version_id(self) -> str | None:
        return self._workflow_version_id

    @property
    def started_at(self) -> str | None:
        """recordedAt of RunStarted"""
        return self._started_at

    @property
    def finished_at(self) -> str | None:
        """of RunCompleted/RunFailed"""
        return self._finished_at

    @property
    def output_ref(self) -> str | None:
        """``outputRef`` of RunCompleted"""
        return self._output_ref

    @property
    def event_count(self) -> int:
        """events folded = last sequence"""
        return self._event_count

    @property
    def steps(self) -> Mapping[str, StepState]:
        """Steps by path, in the order the log first mentioned them to the fold."""
        return MappingProxyType(self._steps)

    @property
    def artifacts(self) -> tuple[str, ...]:
        """Every artifact ref the run recorded, first appearance first."""
        return tuple(self._artifacts)

    @property
    def parallel_groups(self) -> Mapping[str, ParallelGroupState]:
        """Parallel groups by step path (engine extension; not in :meth:`to_json`)."""
        return MappingProxyType(self._parallel)

    @property
    def sub_runs(self) -> SubRunView:
        """The run's parent, its children and its steps waiting for them (engine extension;
        not in :meth:`to_json`)."""
        return self._sub_runs

    @property
    def journal(self) -> tuple[StepJournal, int]:
        """The step paths whose status the fold set, shared along this state's lineage, and
        how many of them this state has seen (engine extension: for indexes kept across
        states; see :mod:`little_dist.run_state._journal`)."""
        return self._journal, self._journal_len

    @property
    def usage(self) -> UsageTotals:
        """Run-wide tokens and dollars, including model calls recorded without a stepPath."""
        return _usage_model(self._usage)

    def to_json(self) -> dict[str, Any]:
        """Upstream's ``MaterializedRunState`` JSON; keys undefined in JS are absent."""
        data: dict[str, Any] = {
            "runId": self._run_id,
            "status": self._status,
            "usage": totals_json(self._usage),
            "steps": {path: step.to_json() for path, step in self._steps.items()},
            "artifacts": list(self._artifacts),
            "eventCount": self._event_count,
        }
        if self._workflow_version_id is not None:
            data["workflowVersionId"] = self._workflow_version_id
        if self._started_at is not None:
            data["startedAt"] = self._started_at
        if self._finished_at is not None:
            data["finishedAt"] = self._finished_at
        if self._output is not ABSENT:
            data["output"] = self._output
        if self._output_ref is not None:
            data["outputRef"] = self._output_ref
        if self._error is not ABSENT:
            data["error"] = self._error
        return data

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RunState):
            return NotImplemented
        return self.to_json() == other.to_json() and parallel_view(self._parallel) == parallel_view(
            other._parallel
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"RunState({self._run_id!r}, {self._status!r}, steps={len(self._steps)}, "
            f"events={self._event_count})"
        )
