"""The runtime: execute one step attempt (fenced, heartbeated, memoized) on any world.

* :func:`execute_step_attempt` / :class:`AttemptOutcome` (:mod:`.attempt`): one attempt,
  from lease to commit; what a fleet worker runs per task and the local runner per thread.
  :mod:`.harness_run`: the harness run of one attempt and the events that end it.
* :class:`Capabilities` (:mod:`.capabilities`): tools, model slots, harnesses, skills;
  :func:`check_grants` (:mod:`.grants`): a submitted document selects among them, never more.
* :class:`LeaseHeartbeat` / :class:`LeaseKeeper` (:mod:`.heartbeat`): renew leases from a
  daemon thread (one lease / many).
* :func:`sweep_dead_attempts` (:mod:`.dead_attempts`): fails attempts whose worker died.
* :mod:`.outputs`: inline-or-artifact output commits, hydration for folds.

The in-process runner that drives whole runs is :mod:`little_dist.local_runner`.
"""

from __future__ import annotations

from little_dist.runtime.attempt import (
    DEFAULT_LEASE_TTL,
    DEFAULT_STEP_TIMEOUT,
    AttemptOutcome,
    execute_step_attempt,
    run_input_of,
)
from little_dist.runtime.capabilities import Capabilities, CapabilityError, RuntimeConfigError
from little_dist.runtime.continuation import PLAIN, Continuation
from little_dist.runtime.dead_attempts import (
    WORKER_STEP_KINDS,
    SweepResult,
    running_worker_attempts,
    sweep_dead_attempts,
)
from little_dist.runtime.failures import TERMINAL_CAUSES, error_envelope
from little_dist.runtime.grants import check_grants
from little_dist.runtime.heartbeat import DEADLINE_GRACE, KeptLease, LeaseHeartbeat, LeaseKeeper
from little_dist.runtime.outputs import (
    INLINE_OUTPUT_LIMIT,
    completion_events,
    hydrate_events,
    schema_problems,
)
from little_dist.world.fleet_keys import step_lease_key

__all__ = [
    "DEADLINE_GRACE",
    "DEFAULT_LEASE_TTL",
    "DEFAULT_STEP_TIMEOUT",
    "INLINE_OUTPUT_LIMIT",
    "PLAIN",
    "TERMINAL_CAUSES",
    "WORKER_STEP_KINDS",
    "AttemptOutcome",
    "Capabilities",
    "CapabilityError",
    "Continuation",
    "KeptLease",
    "LeaseHeartbeat",
    "LeaseKeeper",
    "RuntimeConfigError",
    "SweepResult",
    "check_grants",
    "completion_events",
    "error_envelope",
    "execute_step_attempt",
    "hydrate_events",
    "run_input_of",
    "running_worker_attempts",
    "schema_problems",
    "step_lease_key",
    "sweep_dead_attempts",
]
