"""One error hierarchy for little-dist.

::

    LittleError                       base; ``retryable`` says whether trying again can help
    ├── InvalidInputError             bad input from a user: a malformed workflow, a wrong type
    │   ├── NonHashableValueError     (canonical) a value that has no canonical JSON form
    │   └── ExpressionError           (expressions) a ``{{ }}`` expression that cannot be evaluated
    ├── NotFoundError                 an unknown run id, workflow version or artifact
    ├── ConflictError                 an optimistic-concurrency check failed (expected sequence)
    ├── LeaseLostError                a fencing token was superseded or a lease expired
    │   └── RunEndedError             the run's log holds its end and takes no more events
    ├── EventLogCorruptError          a log with a gap, a duplicate sequence or a foreign run id
    └── StorageUnavailableError       Redis, S3 or the disk could not be reached (retryable)

Foreign errors (redis, botocore, sqlite3, litellm) are translated at the adapter edge and
raised ``from`` the original, so callers only ever catch these types.
"""

from __future__ import annotations

from typing import ClassVar


class LittleError(Exception):
    """Base of every error little-dist raises on purpose."""

    retryable: ClassVar[bool] = False


class InvalidInputError(LittleError):
    """The caller gave input that cannot be used as given."""


class NotFoundError(LittleError):
    """A run, workflow version or artifact that does not exist."""


class ConflictError(LittleError):
    """An optimistic-concurrency check failed; re-read and decide again."""

    retryable = True


class LeaseLostError(LittleError):
    """The holder's fencing token is stale: another holder took the lease."""


class RunEndedError(LeaseLostError):
    """The run has ended (its log holds ``RunCompleted`` or ``RunFailed``): its log takes no
    more events of its own. A writer gets it as it gets a lost lease (the run's end takes
    every writer's right to write away), and stops: an attempt that was in flight when the
    run ended commits nothing."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"Run {run_id} has ended; its event log takes no more events")
        self.run_id = run_id


class EventLogCorruptError(LittleError):
    """An event log that breaks the envelope's invariants."""


class StorageUnavailableError(LittleError):
    """The backing store could not be reached; the same call may succeed later."""

    retryable = True
