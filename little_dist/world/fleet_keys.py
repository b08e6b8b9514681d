"""Every lease name and Redis key the fleet's processes share, in one place.

Workers, schedulers and submitting clients of one fleet find one another's leases and
Redis keys by these names, and fleets already running hold keys spelled this way: a name
here is wire format. Changing a string breaks every process of a running fleet that still
spells it the old way (``tests/test_fleet_keys.py`` pins each one).

Run leases carry the run id as a Redis hash tag (``{run}:...``), so that a fenced append
can check its lease in the run's cluster slot; the fleet's own keys sit beside its signal
stream (``LITTLE_SIGNAL_STREAM``, ``little:signals`` by default). The world's own keys
(event streams, artifacts, archives) are laid out by
:class:`~little_dist.world.redis_s3.keys.KeyLayout` under the world's key prefix.
"""

from __future__ import annotations

__all__ = [
    "active_runs_key",
    "api_rate_prefix",
    "api_tokens_key",
    "backlog_key",
    "backlog_list",
    "dispatch_lease_key",
    "idempotency_key",
    "plan_dispatch_lease_key",
    "plan_lease_key",
    "rebuilt_marker_key",
    "run_lease_key",
    "runner_lease_key",
    "schedule_ticks_key",
    "schedules_key",
    "slots_key",
    "step_lease_key",
    "sweep_lease_key",
]


def run_lease_key(run_id: str, name: str) -> str:
    """The name of a lease that belongs to one run (``run_lease_key(run, "step:draft")``).

    Fenced appends check their lease atomically with the append. In a Redis cluster that is
    only possible when the lease lives in the run's slot, so the name carries the run id as a
    hash tag; other worlds treat it as an opaque string.
    """
    return f"{{{run_id}}}:{name}"


def step_lease_key(run_id: str, step_path: str) -> str:
    """The lease a worker holds while it runs an attempt of ``step_path``."""
    return run_lease_key(run_id, f"step:{step_path}")


def dispatch_lease_key(run_id: str, step_path: str, attempt: int) -> str:
    """The lease whose holder alone may send the task of ``attempt`` of ``step_path``."""
    return run_lease_key(run_id, f"dispatch:{step_path}:{attempt}")


def plan_dispatch_lease_key(run_id: str) -> str:
    """The lease whose holder alone may send a run's ``little.plan`` task."""
    return run_lease_key(run_id, "dispatch:plan")


def plan_lease_key(run_id: str) -> str:
    """The lease a worker holds while it plans a run."""
    return run_lease_key(run_id, "plan")


def runner_lease_key(run_id: str) -> str:
    """The lease of the one in-process runner that drives a run (``LocalRunner``)."""
    return run_lease_key(run_id, "runner")


def active_runs_key(signal_stream: str) -> str:
    """The Redis set of active run ids (beside the signal stream it belongs to)."""
    return f"{signal_stream}:active-runs"


def rebuilt_marker_key(active_runs: str) -> str:
    """The marker set once the active-run set ``active_runs`` was rebuilt for this Redis
    dataset (see :class:`~little_dist.fleet.sweeper.ActiveRuns`)."""
    return f"{active_runs}:built"


def sweep_lease_key(signal_stream: str) -> str:
    """The lease of the one scheduler that sweeps the active runs."""
    return f"scheduler-sweep:{signal_stream}"


def slots_key(signal_stream: str) -> str:
    """The hash of registered worker slots (beside the signal stream)."""
    return f"{signal_stream}:slots"


def backlog_key(signal_stream: str, queue: str) -> str:
    """The hash of each run's held-back branches for ``queue``."""
    return f"{signal_stream}:backlog:{queue}"


def backlog_list(queue: str) -> str:
    """The list whose length is ``queue``'s held-back branches (``little.worker.backlog``)."""
    return f"{queue}.backlog"


def api_tokens_key(signal_stream: str) -> str:
    """The hash of the HTTP API's bearer tokens: token id -> its record (JSON: name,
    scopes, the sha256 of its secret, when it was made; see :mod:`little_dist.http.tokens`)."""
    return f"{signal_stream}:api-tokens"


def schedules_key(signal_stream: str) -> str:
    """The hash of the fleet's schedules: schedule id -> its JSON (see
    :mod:`little_dist.fleet.schedule_store`)."""
    return f"{signal_stream}:schedules"


def schedule_ticks_key(signal_stream: str) -> str:
    """The hash of each schedule's last tick handled (started or skipped): schedule id ->
    whole seconds since the epoch; moved on by compare-and-set only."""
    return f"{signal_stream}:schedule-ticks"


def idempotency_key(signal_stream: str, key_digest: str) -> str:
    """What an ``Idempotency-Key`` of ``POST /v1/runs`` answered (JSON: the body's hash and
    the run id), by the sha256 hex of the key; it expires."""
    return f"{signal_stream}:idempotency:{key_digest}"


def api_rate_prefix(signal_stream: str) -> str:
    """The key prefix of the HTTP API's per-token rate windows (``limits``' moving windows,
    one per token with a rate; see :mod:`little_dist.http.rate_limits`)."""
    return f"{signal_stream}:api-rate"
