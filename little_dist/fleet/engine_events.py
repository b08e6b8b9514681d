"""The engine's own events in a run's log (beside upstream's catalogue), under ``little.``.

The fold tolerates them (:mod:`little_dist.run_state` counts what it does not read); the
fleet acts on them. Their occurrence ids are in :mod:`little_dist.occurrences`.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CANCEL_EVENT_TYPE",
    "PLAN_FAILED_EVENT_TYPE",
    "SUBMITTED_EVENT_TYPE",
    "SUBMITTED_PARENT_FIELD",
]

#: Engine event asking a run to stop (``Client.cancel``, ``little cancel``); occurrence
#: ``cancel``. ``decide`` then fails the run with causeCode ``cancelled``.
CANCEL_EVENT_TYPE: Final = "little.run.cancel_requested"
#: Engine event recording a submission that still has to be planned (``little.plan``):
#: ``{workflowId, input}``, occurrence ``submit``. Appended before ``RunStarted``.
SUBMITTED_EVENT_TYPE: Final = "little.run.submitted"
#: The field of ``little.run.submitted`` holding a sub-run's parent link (``parentRunId``,
#: ... see :mod:`little_dist.subruns.links`): the planner copies it into ``RunStarted``.
SUBMITTED_PARENT_FIELD: Final = "parent"
#: Engine event recording a ``little.plan`` that failed in a way that may pass (a provider's
#: rate limit, an unexpected error): ``{attempt, error}``, occurrence ``plan-failed:{n}``.
PLAN_FAILED_EVENT_TYPE: Final = "little.run.plan_failed"
