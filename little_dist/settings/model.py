"""The fleet's :class:`Settings`: every ``LITTLE_*`` variable of a fleet process, checked at
start, and the problems a combination of them has (:func:`_cross_field_problems`)."""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import urlsplit

from pydantic import SecretStr, field_validator, model_validator

from little_dist.errors import InvalidInputError
from little_dist.redis_tls import tls_problems
from little_dist.settings.fields import (
    _BROKER_SCHEMES,
    _BUCKET_NAME,
    _MASK,
    _MAX_SHOWN,
    _MODULE_PATH,
    _REDIS_SCHEMES,
    _REGION,
    _STREAM_NAME,
    ROLES,
    BranchWindow,
    Role,
    WorkerPool,
    _env,
    _queue,
    _scheme_of,
    _seconds,
    mask_url,
)
from little_dist.settings.groups import LimitSettings, QuotaSettings
from little_dist.settings.hooks import HookSettings


class Settings(LimitSettings, QuotaSettings, HookSettings):
    """Everything a fleet process needs to know, from the environment (see module docs)."""

    # -- where things live -----------------------------------------------------------------
    redis_url: str = _env(
        "LITTLE_REDIS_URL",
        "redis://127.0.0.1:6379/0",
        "a Redis URL: redis://, rediss:// or unix://",
    )
    broker_url: str = _env(
        "LITTLE_BROKER_URL",
        "",
        "a Celery broker URL (redis://, rediss://, sentinel://, amqp://, ...); "
        "default: LITTLE_REDIS_URL",
    )
    world: str | None = _env(
        "LITTLE_WORLD",
        None,
        "a world spec: a directory, 'local:PATH', 'memory:' or a redis:// URL",
    )
    app: str | None = _env(
        "LITTLE_APP",
        None,
        "a dotted module path (optionally 'module:attribute') naming your tools and models",
        pattern=_MODULE_PATH.pattern,
    )
    s3_endpoint: str | None = _env(
        "LITTLE_S3_ENDPOINT", None, "an http:// or https:// URL of the S3 endpoint"
    )
    s3_bucket: str | None = _env(
        "LITTLE_S3_BUCKET",
        None,
        "an S3 bucket name: 3 to 63 lowercase letters, digits, '.' or '-'",
        pattern=_BUCKET_NAME.pattern,
    )
    s3_region: str | None = _env(
        "LITTLE_S3_REGION",
        None,
        "an S3 region such as us-east-1",
        pattern=_REGION.pattern,
    )
    aws_access_key_id: SecretStr | None = _env("AWS_ACCESS_KEY_ID", None, "an access key id")
    aws_secret_access_key: SecretStr | None = _env(
        "AWS_SECRET_ACCESS_KEY", None, "a secret access key"
    )

    # -- queues, one per role ----------------------------------------------------------------
    queue_planner: str = _queue("planner")
    queue_orchestrator: str = _queue("orchestrator")
    queue_worker: str = _queue("worker")
    queue_fixer: str = _queue("fixer")

    # -- observability ----------------------------------------------------------------------
    metrics_port: int | None = _env(
        "LITTLE_METRICS_PORT", None, "a TCP port (1-65535) to serve /metrics on", ge=1, le=65535
    )

    # -- one worker process (set per role by the launch profiles in workers/profiles/) --------
    worker_pool: WorkerPool = _env(
        "LITTLE_WORKER_POOL", "threads", "one of 'threads', 'prefork', 'solo'"
    )
    worker_concurrency: int = _env(
        "LITTLE_WORKER_CONCURRENCY", 4, "a whole number of task slots, 1 or more", ge=1
    )
    worker_prefetch_multiplier: int = _env(
        "LITTLE_WORKER_PREFETCH_MULTIPLIER",
        1,
        "a whole number, 1 or more (1 keeps queued steps visible to other workers)",
        ge=1,
    )
    # Eager continuation: a worker that commits a step and wins the dispatch of a next step
    # of its roles runs it itself (no broker hop), up to this many steps or seconds per task,
    # then sends the next one through the queue (so other runs get their turn) unless the
    # queue holds nothing but that run's own waiting attempts. 0: off.
    worker_inline_steps: int = _env(
        "LITTLE_WORKER_INLINE_STEPS",
        100,
        "a whole number of steps, 0 or more (0 sends every step through the queue)",
        ge=0,
    )
    worker_inline_seconds: float = _seconds("LITTLE_WORKER_INLINE_SECONDS", 2.0, allow_zero=True)
    # A task's whole inline run (its own attempt and every continuation) ends after this,
    # even when nothing else waits for the slot: one Celery task never runs for hours.
    worker_inline_max_seconds: float = _seconds("LITTLE_WORKER_INLINE_MAX_SECONDS", 300.0)
    # How long one step attempt may run before it is failed with causeCode "timeout" (a
    # workflow's define_workflow(step_timeout=...) wins). A hung model or tool call cannot
    # keep a run open past it. 0: no limit.
    step_timeout: float = _seconds("LITTLE_STEP_TIMEOUT", 900.0, allow_zero=True)

    # -- time ------------------------------------------------------------------------------
    lease_ttl: float = _seconds("LITTLE_LEASE_TTL", 30.0)
    heartbeat_interval: float = _seconds("LITTLE_HEARTBEAT_INTERVAL", 10.0)
    dispatch_resend_after: float = _seconds("LITTLE_DISPATCH_RESEND_AFTER", 60.0)
    soft_shutdown_timeout: float = _seconds("LITTLE_SOFT_SHUTDOWN_TIMEOUT", 60.0, allow_zero=True)
    task_soft_time_limit: float = _seconds("LITTLE_TASK_SOFT_TIME_LIMIT", 900.0)
    task_time_limit: float = _seconds("LITTLE_TASK_TIME_LIMIT", 960.0)
    broker_visibility_timeout: float = _seconds("LITTLE_BROKER_VISIBILITY_TIMEOUT", 3600.0)
    # A worker that lost its broker tries to reach it again this many times in a row (2 s
    # apart, growing to 30 s: about 47 minutes for 100), then exits with status 1 so that its
    # supervisor restarts it. 0: it keeps trying.
    broker_connection_max_retries: int = _env(
        "LITTLE_BROKER_CONNECTION_MAX_RETRIES",
        100,
        "a whole number of retries, 0 or more (0 retries forever)",
        ge=0,
    )

    # -- scheduler signals and the event log's retention ----------------------------------
    signal_stream: str = _env(
        "LITTLE_SIGNAL_STREAM",
        "little:signals",
        "a Redis stream key without spaces",
        pattern=_STREAM_NAME.pattern,
    )
    signal_group: str = _env(
        "LITTLE_SIGNAL_GROUP",
        "little-schedulers",
        "a consumer group name without spaces",
        pattern=_STREAM_NAME.pattern,
    )
    signal_claim_idle: float = _seconds("LITTLE_SIGNAL_CLAIM_IDLE", 60.0)
    # How long an archived run's keys stay in Redis (its log is in S3 then; reads of a run
    # Redis let go fall through to the archive): minutes, not days, or Redis holds every
    # run of the last days (~31 KB a small run).
    archive_ttl: float = _seconds("LITTLE_ARCHIVE_TTL", 300.0, allow_zero=True)
    # How long after a run ends the scheduler starts copying it to S3: the clients that wake
    # on the end read the log first, without that copy competing for the machine.
    archive_delay: float = _seconds("LITTLE_ARCHIVE_DELAY", 2.0, allow_zero=True)

    # -- the engine ------------------------------------------------------------------------
    # Parallel steps that declare the LWIR's own ceiling (maxBranches: 100) may fan out up to
    # this many items. The scheduler and every worker must read the same value.
    max_branches_cap: int | None = _env(
        "LITTLE_MAX_BRANCHES_CAP",
        None,
        "a whole number of parallel branches, 100 or more",
        ge=100,
    )

    # A parallel step keeps at most the worker queue's registered slots in flight ("fleet",
    # see little_dist.fleet.worker_slots), or its maxConcurrency whatever the fleet ("declared").
    branch_window: BranchWindow = _env(
        "LITTLE_BRANCH_WINDOW",
        "fleet",
        "'fleet' (at most the workers' slots in flight) or 'declared' (maxConcurrency)",
    )

    # -- memory ------------------------------------------------------------------------------
    run_cache_bytes: int = _env(
        "LITTLE_RUN_CACHE_BYTES",
        256 * 1024 * 1024,
        "a whole number of bytes, 1 or more",
        ge=1,
    )
    version_cache_bytes: int = _env(
        "LITTLE_VERSION_CACHE_BYTES",
        64 * 1024 * 1024,
        "a whole number of bytes, 1 or more",
        ge=1,
    )

    # -- field checks ------------------------------------------------------------------------
    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str) -> str:
        if _scheme_of(value) not in _REDIS_SCHEMES:
            raise ValueError("not a Redis URL")
        return value

    @field_validator("broker_url")
    @classmethod
    def _check_broker_url(cls, value: str) -> str:
        if value and _scheme_of(value) not in _BROKER_SCHEMES:
            raise ValueError("not a broker URL")
        return value

    @field_validator("world")
    @classmethod
    def _check_world(cls, value: str | None) -> str | None:
        if value is not None and "://" in value and _scheme_of(value) not in _REDIS_SCHEMES:
            raise ValueError("unknown world scheme")
        return value

    @field_validator("s3_endpoint")
    @classmethod
    def _check_endpoint(cls, value: str | None) -> str | None:
        if value is not None:
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError("not an http(s) URL")
        return value

    @model_validator(mode="after")
    def _check_together(self) -> Settings:
        if not self.broker_url:
            # Frozen model: the default broker is filled in once, while validating.
            object.__setattr__(self, "broker_url", self.redis_url)
        problems = _cross_field_problems(self)
        if problems:
            raise ValueError("\n".join(problems))
        return self

    # -- reading ---------------------------------------------------------------------------
    @property
    def queues(self) -> dict[Role, str]:
        """The queue of every role."""
        return {role: self.queue_for(role) for role in ROLES}

    def queue_for(self, role: Role) -> str:
        """The Celery queue that carries ``role``'s tasks."""
        if role not in ROLES:
            raise InvalidInputError(f"Unknown role {role!r} (expected one of {', '.join(ROLES)})")
        queue: str = getattr(self, f"queue_{role}")
        return queue

    def __repr_args__(self) -> Any:
        # URLs may carry a password (redis://:secret@host); SecretStr fields mask themselves.
        for name, value in super().__repr_args__():
            if isinstance(value, str) and name in _URL_FIELDS:
                yield name, mask_url(value)
            else:
                yield name, value


_URL_FIELDS: Final = frozenset({"redis_url", "broker_url", "world", "s3_endpoint"})
_SECRET_FIELDS: Final = frozenset({"aws_access_key_id", "aws_secret_access_key", "callback_secret"})
_ENV_TO_FIELD: Final[dict[str, str]] = {
    str(field.validation_alias): name for name, field in Settings.model_fields.items()
}
KNOWN_ENV_VARS: Final[frozenset[str]] = frozenset(_ENV_TO_FIELD)
"""Every environment variable :class:`Settings` reads."""


def _shown(env_name: str, value: object) -> str:
    """``value`` as it may appear in a message: secrets masked, long values cut."""
    field = _ENV_TO_FIELD.get(env_name)
    if field in _SECRET_FIELDS:
        return repr(_MASK)
    if isinstance(value, SecretStr):
        return repr(_MASK)
    if isinstance(value, str) and field in _URL_FIELDS:
        value = mask_url(value)
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def _cross_field_problems(s: Settings) -> list[str]:
    """Values that are fine alone but not together."""
    problems: list[str] = []
    if s.heartbeat_interval >= s.lease_ttl:
        problems.append(
            f"LITTLE_HEARTBEAT_INTERVAL={s.heartbeat_interval!r}: expected less than "
            f"LITTLE_LEASE_TTL ({s.lease_ttl!r}), so a lease is renewed before it expires "
            "(a third of the TTL is usual)"
        )
    if s.task_soft_time_limit >= s.task_time_limit:
        problems.append(
            f"LITTLE_TASK_SOFT_TIME_LIMIT={s.task_soft_time_limit!r}: expected less than "
            f"LITTLE_TASK_TIME_LIMIT ({s.task_time_limit!r}), so a step can record its "
            "failure before the hard limit kills it"
        )
    if s.task_time_limit >= s.broker_visibility_timeout:
        problems.append(
            f"LITTLE_TASK_TIME_LIMIT={s.task_time_limit!r}: expected less than "
            f"LITTLE_BROKER_VISIBILITY_TIMEOUT ({s.broker_visibility_timeout!r}); a Redis "
            "broker delivers a task again, in parallel, once it runs longer than that"
        )
    urls = {"LITTLE_REDIS_URL": s.redis_url, "LITTLE_WORLD": s.world}
    if s.broker_url != s.redis_url:  # (a broker left unset is the Redis URL: said once)
        urls["LITTLE_BROKER_URL"] = s.broker_url
    for name, url in urls.items():
        for problem in tls_problems(url) if url else ():
            problems.append(f"{name}={_shown(name, url)}: {problem}")
    seen: dict[str, Role] = {}
    for role in ROLES:
        queue = s.queue_for(role)
        if queue in seen:
            problems.append(
                f"LITTLE_QUEUE_{role.upper()}={queue!r}: expected a queue of its own "
                f"(LITTLE_QUEUE_{seen[queue].upper()} names the same one)"
            )
        else:
            seen[queue] = role
    if s.world is not None and _scheme_of(s.world) in _REDIS_SCHEMES and not s.s3_bucket:
        problems.append(
            f"LITTLE_S3_BUCKET=(unset): expected a bucket name, because LITTLE_WORLD="
            f"{_shown('LITTLE_WORLD', s.world)} keeps its artifacts in S3"
        )
    return problems
