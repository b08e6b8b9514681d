"""Poison runs: a run the scheduler cannot advance is failed, not retried forever.

A look at a run that raises something other than a storage outage (a bug, or a log the fold
cannot read) is counted; after :data:`POISON_LOOKS` such looks in a row the run is failed
with ``RunFailed`` (causeCode ``internal``), so that no scheduler looks at it again. The
traceback goes to the scheduler's log, never into the run's events. A look that works resets
the count.
"""

from __future__ import annotations

import logging
from typing import Final

from little_dist import occurrences
from little_dist.errors import LittleError
from little_dist.events import EventInput
from little_dist.fleet.archiving import FINISHED_MEMORY
from little_dist.fleet.scheduler_log import log_event
from little_dist.world.base import World

__all__ = ["POISON_LOOKS", "PoisonRuns", "internal_failure"]

#: Looks in a row that raise (not a storage outage) before a run is failed as "internal".
POISON_LOOKS: Final = 3


class PoisonRuns:
    """The looks in a row that raised, per run (the last :data:`FINISHED_MEMORY` runs)."""

    def __init__(self, world: World, *, looks: int = POISON_LOOKS) -> None:
        self._world = world
        self._looks = looks
        self._failures: dict[str, int] = {}

    def cleared(self, run_id: str) -> None:
        """A look at ``run_id`` worked: its count starts again."""
        self._failures.pop(run_id, None)

    def broken(self, run_id: str, exc: Exception) -> bool:
        """A look at ``run_id`` raised ``exc``: log it, count it, and once the count reaches
        the limit record the run's ``RunFailed``; whether it did (the run is over)."""
        count = self._failures.pop(run_id, 0) + 1
        self._failures[run_id] = count
        while len(self._failures) > FINISHED_MEMORY:
            self._failures.pop(next(iter(self._failures)))
        log_event(
            "run-error",
            level=logging.ERROR,
            exc_info=exc,
            run=run_id,
            error=f"{type(exc).__name__}: {exc}",
            failures=count,
        )
        if count < self._looks:
            return False
        try:
            self._world.append_batch(run_id, [internal_failure(count, exc)])
        except LittleError as append_error:
            log_event(
                "run-error",
                level=logging.ERROR,
                exc_info=append_error,
                run=run_id,
                error=f"could not record RunFailed: {append_error}",
            )
            return False
        self._failures.pop(run_id, None)
        log_event("run-poisoned", level=logging.ERROR, run=run_id, failures=count)
        return True


def internal_failure(looks: int, exc: Exception) -> EventInput:
    """The ``RunFailed`` of a run the engine could not advance (no traceback: that is in
    the scheduler's log)."""
    return EventInput(
        type="RunFailed",
        occurrence_id=occurrences.RUN_END,
        payload={
            "error": {
                "name": "InternalError",
                "message": (
                    f"the scheduler could not advance this run ({looks} looks in a row "
                    f"failed, the last with {type(exc).__name__}: {exc}); see its log"
                )[:2000],
                "causeCode": "internal",
                "retriable": False,
            },
        },
    )
