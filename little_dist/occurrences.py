"""Occurrence ids: the names that make an append of a fact idempotent.

Every event the engine records carries an ``occurrenceId``; an append whose occurrence id is
already in the run's log records nothing new (every world enforces it). Whoever records a
fact — the in-process runner, the scheduler, a worker's fast path, the sweeper, a client —
names it the same way, so that two of them recording it at once record it once. That only
holds if the names are spelled in one place: here.

==========================  ===========================  ===================================
fact                        occurrence id                recorded by
==========================  ===========================  ===================================
the version a run uses      ``version-registered``       client, planner, in-process runner
the run starts              ``run-start``                same
the run ends                ``run-end``                  ``decide``; planning that failed;
                                                         the scheduler (a poisoned run)
submitted for planning      ``submit``                   client
cancel asked for            ``cancel``                   client
the run's dollar budget     ``budget``                   client, in-process runner
the run's limits            ``limits``                   client, in-process runner
the run's callback URL      ``callback``                 client
a callback attempt          ``callback-attempt:{n}``     the scheduler delivering it
the callback's outcome      ``callback-outcome``         same
a planning try failed       ``plan-failed:{n}``          ``little.plan``
attempt 1 scheduled         ``sched:{path}:1``           ``decide``
an attempt starts           ``start:{path}:{n}``         the attempt (or ``decide`` for
                                                         decision and parallel steps)
an attempt ends             ``end:{path}:{n}``           the attempt's commit, the step
                                                         timeout's watchdog, the sweeper
its output artifact         ``artifact:{path}:{n}``      the attempt's commit
its output validated        ``validated:{path}:{n}``     the attempt's commit
a branch scheduled          ``pbranch:{branch}``         ``decide``
a branch ends               ``pbranch-end:{branch}``     ``decide``
a harness event             ``{kind}:{path}:{n}[:...]``  the attempt's event recorder
the planner's session       ``planner:{kind}[:{rev}]``   the planner
a sub-run started           ``subrun:{child}``           the parent's tool call
a sub-run ended             ``subrun-end:{child}``       the parent's tool call
an approval asked for       ``approval:{id}``            the tool call an ``ask`` holds
an approval decided         ``approval-decided:{id}``    a person (CLI, HTTP), a deadline
==========================  ===========================  ===================================

``path`` is a step path (``review``, ``fan[a].work``), ``n`` an attempt number (from 1),
``branch`` a branch path (``fan[a]``). Pure: strings in, strings out.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BUDGET",
    "CALLBACK",
    "CALLBACK_OUTCOME",
    "CANCEL",
    "LIMITS",
    "RUN_END",
    "RUN_START",
    "SUBMITTED",
    "VERSION_REGISTERED",
    "approval_decided",
    "approval_requested",
    "attempt_ended",
    "attempt_started",
    "branch_ended",
    "branch_scheduled",
    "callback_attempt",
    "harness_event",
    "output_artifact",
    "output_validated",
    "plan_failed",
    "planner",
    "scheduled",
    "sub_run_ended",
    "sub_run_started",
]

VERSION_REGISTERED: Final = "version-registered"
RUN_START: Final = "run-start"
RUN_END: Final = "run-end"
SUBMITTED: Final = "submit"
CANCEL: Final = "cancel"
BUDGET: Final = "budget"
LIMITS: Final = "limits"
CALLBACK: Final = "callback"
CALLBACK_OUTCOME: Final = "callback-outcome"


def callback_attempt(attempt: int) -> str:
    """``little.callback.attempted`` of delivery attempt ``attempt`` (from 1)."""
    return f"callback-attempt:{attempt}"


def scheduled(path: str, attempt: int = 1) -> str:
    """``StepScheduled`` of ``path`` (``decide`` schedules first attempts only)."""
    return f"sched:{path}:{attempt}"


def attempt_started(path: str, attempt: int) -> str:
    """``StepAttemptStarted`` of attempt ``attempt`` of ``path``."""
    return f"start:{path}:{attempt}"


def attempt_ended(path: str, attempt: int) -> str:
    """``StepCompleted`` or ``StepFailed`` of attempt ``attempt`` of ``path``: an attempt
    ends once, whoever records its end."""
    return f"end:{path}:{attempt}"


def output_artifact(path: str, attempt: int) -> str:
    """``ArtifactCreated`` of the output an attempt commits."""
    return f"artifact:{path}:{attempt}"


def output_validated(path: str, attempt: int) -> str:
    """``StepOutputValidated`` of the output an attempt commits."""
    return f"validated:{path}:{attempt}"


def branch_scheduled(branch: str) -> str:
    """``ParallelBranchScheduled`` of a branch (``fan[a]``)."""
    return f"pbranch:{branch}"


def branch_ended(branch: str) -> str:
    """``ParallelBranchCompleted`` or ``ParallelBranchFailed`` of a branch."""
    return f"pbranch-end:{branch}"


def plan_failed(failures: int) -> str:
    """``little.run.plan_failed``: the ``failures``-th planning try that failed."""
    return f"plan-failed:{failures}"


def harness_event(kind: str, path: str, attempt: int, *parts: object, prefix: str = "") -> str:
    """A harness event of one attempt: ``{prefix}{kind}:{path}:{attempt}[:{part}...]``."""
    tail = "".join(f":{part}" for part in parts)
    return f"{prefix}{kind}:{path}:{attempt}{tail}"


def planner(kind: str, revision: int | None = None) -> str:
    """An event of the planner's session: ``planner:{kind}`` or ``planner:{kind}:{revision}``."""
    return f"planner:{kind}" if revision is None else f"planner:{kind}:{revision}"


def sub_run_started(child_run_id: str) -> str:
    """``little.subrun.started`` in the parent's log: one per child, whichever attempt of
    the parent's step records it (see :mod:`little_dist.subruns`)."""
    return f"subrun:{child_run_id}"


def sub_run_ended(child_run_id: str) -> str:
    """``little.subrun.ended`` in the parent's log: the child's end, recorded once."""
    return f"subrun-end:{child_run_id}"


def approval_requested(approval_id: str) -> str:
    """``little.approval.requested``: one per held call, whichever attempt records it."""
    return f"approval:{approval_id}"


def approval_decided(approval_id: str) -> str:
    """``little.approval.decided``: the first decision recorded stands."""
    return f"approval-decided:{approval_id}"
