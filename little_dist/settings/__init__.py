"""The fleet's settings: one model, read from the environment and checked at start.

Every fleet process (``little worker``, ``little scheduler``, ``little submit``, the Celery
app) reads its configuration from environment variables, through :func:`load_settings`.
Names follow ``LITTLE_<FIELD>`` except the two AWS credentials, which keep the names every
AWS client already knows:

==================================  =============================  ==========================
variable                            field                          default
==================================  =============================  ==========================
``LITTLE_REDIS_URL``                ``redis_url``                  ``redis://127.0.0.1:6379/0``
``LITTLE_BROKER_URL``               ``broker_url``                 the Redis URL
``LITTLE_WORLD``                    ``world``                      unset (a world spec, see
                                                                   ``little_dist.world.factory``)
``LITTLE_APP``                      ``app``                        unset (the module holding
                                                                   your tools and models)
``LITTLE_S3_ENDPOINT``              ``s3_endpoint``                unset (AWS)
``LITTLE_S3_BUCKET``                ``s3_bucket``                  unset
``LITTLE_S3_REGION``                ``s3_region``                  unset
``AWS_ACCESS_KEY_ID``               ``aws_access_key_id``          unset (secret)
``AWS_SECRET_ACCESS_KEY``           ``aws_secret_access_key``      unset (secret)
``LITTLE_QUEUE_<ROLE>``             ``queue_<role>``               ``little.<role>``
``LITTLE_WORKER_POOL``              ``worker_pool``                ``threads``
``LITTLE_WORKER_CONCURRENCY``       ``worker_concurrency``         ``4``
``LITTLE_WORKER_PREFETCH_MULTIPLIER`` ``worker_prefetch_multiplier`` ``1``
``LITTLE_WORKER_INLINE_MAX_SECONDS`` ``worker_inline_max_seconds`` ``300`` s
``LITTLE_STEP_TIMEOUT``             ``step_timeout``               ``900`` s (0: no limit)
``LITTLE_LEASE_TTL``                ``lease_ttl``                  ``30`` s
``LITTLE_HEARTBEAT_INTERVAL``       ``heartbeat_interval``         ``10`` s
``LITTLE_DISPATCH_RESEND_AFTER``    ``dispatch_resend_after``      ``60`` s
``LITTLE_SOFT_SHUTDOWN_TIMEOUT``    ``soft_shutdown_timeout``      ``60`` s
``LITTLE_TASK_SOFT_TIME_LIMIT``     ``task_soft_time_limit``       ``900`` s
``LITTLE_TASK_TIME_LIMIT``          ``task_time_limit``            ``960`` s
``LITTLE_BROKER_VISIBILITY_TIMEOUT`` ``broker_visibility_timeout`` ``3600`` s
``LITTLE_BROKER_CONNECTION_MAX_RETRIES`` ``broker_connection_max_retries`` ``100`` (``0``: forever)
``LITTLE_SIGNAL_STREAM``            ``signal_stream``              ``little:signals``
``LITTLE_SIGNAL_GROUP``             ``signal_group``               ``little-schedulers``
``LITTLE_SIGNAL_CLAIM_IDLE``        ``signal_claim_idle``          ``60`` s
``LITTLE_ARCHIVE_TTL``              ``archive_ttl``                ``300`` s (5 minutes)
``LITTLE_ARCHIVE_DELAY``            ``archive_delay``              ``2`` s
``LITTLE_MAX_BRANCHES_CAP``         ``max_branches_cap``           unset (upstream's 100)
``LITTLE_BRANCH_WINDOW``            ``branch_window``              ``fleet``
``LITTLE_MAX_INPUT_BYTES``          ``max_input_bytes``            ``1048576`` (1 MiB) (a)
``LITTLE_MAX_LWIR_BYTES``           ``max_lwir_bytes``             ``1048576`` (1 MiB) (b)
``LITTLE_MAX_STEPS``                ``max_steps``                  ``1000`` (c)
``LITTLE_MAX_JSON_DEPTH``           ``max_json_depth``             ``64``, at most 256 (d)
``LITTLE_RUN_CACHE_BYTES``          ``run_cache_bytes``            ``268435456`` (256 MiB) (e)
``LITTLE_VERSION_CACHE_BYTES``      ``version_cache_bytes``        ``67108864`` (64 MiB) (f)
``LITTLE_QUOTAS``                   ``quotas``                     unset: no limits (g)
``LITTLE_QUOTA_MAX_WAIT``           ``quota_max_wait``             ``60`` s (g)
``LITTLE_QUOTA_GIVE_BACK_AFTER``    ``quota_give_back_after``      ``2`` s (g)
``LITTLE_QUOTA_LEASE``              ``quota_lease``                ``900`` s (g)
``LITTLE_METRICS_PORT``             ``metrics_port``               unset: no ``/metrics`` (h)
``LITTLE_CALLBACK_SECRET``          ``callback_secret``            unset (secret) (i)
``LITTLE_CALLBACK_RETRY_FOR``       ``callback_retry_for``         ``900`` s (i)
``LITTLE_CALLBACK_BACKOFF``         ``callback_backoff``           ``1`` s (i)
``LITTLE_CALLBACK_TIMEOUT``         ``callback_timeout``           ``10`` s (i)
``LITTLE_SCHEDULE_POLL``            ``schedule_poll``              ``1`` s (i)
==================================  =============================  ==========================

The Redis URLs may be ``rediss://`` (TLS); their ``ssl_*`` query options are checked here
(see :mod:`little_dist.redis_tls`), and a ``rediss://`` URL must name ``ssl_cert_reqs``.

Why those defaults (the limits on input are checked where input enters, see
:mod:`little_dist.limits`; ``little run`` and ``little validate`` read them too):

(a) the run input is stored inline in ``RunStarted``, read by every process that folds the
    run and hashed into the version's lock; larger data belongs in an artifact or a URL.
(b) a 1,000-step workflow is about 300 KB of canonical JSON; every worker and scheduler keeps
    the versions it runs in memory.
(c) ``decide`` walks a run's steps on every look; planners write tens.
(d) real documents nest fewer than 20 levels; at 64 every recursive reader (the validator,
    jsonschema, canonical JSON) stays far below Python's recursion limit. 256 is the deepest
    value canonical JSON takes.
(e) the folded runs one worker or scheduler process keeps (an estimate from the events
    folded, :data:`little_dist.fleet.run_tracker.EVENT_BYTES` each); past it the least recently
    used run is dropped and read from the log again if it comes back.
(f) the compiled versions one process keeps, by the length of their canonical LWIR.
(g) provider quotas (:mod:`little_dist.quotas`): the rules as JSON or a JSON file's path; how
    long one model call may wait for quota in place before its attempt fails (retriable);
    how long a reservation never settled (its worker died) still counts as in flight.
    ``little run`` reads these alone (:func:`load_quota_settings`) and keeps the windows in
    memory; fleet workers keep them in the fleet's Redis.
(h) the port ``little worker`` and ``little scheduler`` serve Prometheus metrics on
    (``http://HOST:PORT/metrics``, :mod:`little_dist.observability`); unset, no metrics are
    recorded at all. Traces are turned on by the standard ``OTEL_EXPORTER_OTLP_ENDPOINT``.
(i) read by ``little scheduler``: the key that signs a run's callback (unset: callbacks are
    recorded as abandoned, never sent unsigned), how long after the end it is retried, the
    first wait between attempts (doubling to 60 s) and one attempt's timeout
    (:mod:`little_dist.fleet.callbacks`); how often schedules' due ticks are looked for
    (:mod:`little_dist.fleet.schedules`).

An empty variable counts as unset. Every bad value is reported at once, one line each (the
variable, its value with secrets and URL passwords masked, what is expected), in a
:class:`SettingsError`. Secrets never appear in messages or in ``repr``.
"""

from __future__ import annotations

from little_dist.settings.fields import (
    ROLES,
    Role,
    SettingsError,
    WorkerPool,
    mask_url,
)
from little_dist.settings.groups import QuotaSettings
from little_dist.settings.loading import load_limits, load_quota_settings, load_settings
from little_dist.settings.model import KNOWN_ENV_VARS, Settings

__all__ = [
    "KNOWN_ENV_VARS",
    "ROLES",
    "QuotaSettings",
    "Role",
    "Settings",
    "SettingsError",
    "WorkerPool",
    "load_limits",
    "load_quota_settings",
    "load_settings",
    "mask_url",
]
