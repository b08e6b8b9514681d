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

An empty variable counts as unset. Every bad value is reported at once, one line each (the
variable, its value with secrets and URL passwords masked, what is expected), in a
:class:`SettingsError`. Secrets never appear in messages or in ``repr``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, Final, Literal, get_args
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from little_dist.errors import InvalidInputError
from little_dist.limits import (
    DEFAULT_MAX_INPUT_BYTES,
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_MAX_LWIR_BYTES,
    DEFAULT_MAX_STEPS,
    MAX_JSON_DEPTH_CEILING,
    InputLimits,
)
from little_dist.redis_tls import tls_problems

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

Role = Literal["planner", "orchestrator", "worker", "fixer"]
ROLES: Final[tuple[Role, ...]] = get_args(Role)
WorkerPool = Literal["threads", "prefork", "solo"]
BranchWindow = Literal["fleet", "declared"]

_REDIS_SCHEMES: Final = ("redis", "rediss", "unix")
# Celery brokers we can name; KEDA's queue-depth scaling assumes a Redis broker.
_BROKER_SCHEMES: Final = ("redis", "rediss", "sentinel", "amqp", "amqps", "pyamqp", "memory")
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")
_STREAM_NAME = re.compile(r"^\S+$")
_MODULE_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:[A-Za-z_]\w*)?$")
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_REGION = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_MASK: Final = "**********"
_MAX_SHOWN = 80


class SettingsError(InvalidInputError):
    """One or more environment variables hold values the fleet cannot use.

    ``problems`` holds one line per bad value: ``NAME=value: expected ...``.
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = tuple(problems)
        count = len(self.problems)
        noun = "setting" if count == 1 else "settings"
        super().__init__(f"{count} invalid {noun} in the environment:\n" + "\n".join(problems))


def _env(name: str, default: Any, expected: str, **constraints: Any) -> Any:
    """A field read from environment variable ``name``; ``expected`` is said when it is bad."""
    return Field(default, validation_alias=name, description=expected, **constraints)


def _seconds(name: str, default: float, *, allow_zero: bool = False) -> Any:
    bound = {"ge": 0} if allow_zero else {"gt": 0}
    what = "0 or more" if allow_zero else "greater than 0"
    return _env(name, default, f"a number of seconds, {what}", allow_inf_nan=False, **bound)


def _queue(role: str) -> Any:
    return _env(
        f"LITTLE_QUEUE_{role.upper()}",
        f"little.{role}",
        "a queue name: letters, digits, '.', '_', ':' or '-', no spaces",
        pattern=_QUEUE_NAME.pattern,
    )


def mask_url(url: str) -> str:
    """``url`` with the password in its user info replaced by asterisks."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if not password:
        return url
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{user}:{_MASK}@{host}"))


def _scheme_of(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


_GIVEN_ENV: ContextVar[Mapping[str, str] | None] = ContextVar("little_settings_env", default=None)


class _Environment(PydanticBaseSettingsSource):
    """Each field's variable (its validation alias) from one mapping; empty counts as unset."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self._environ = environ

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        name = str(field.validation_alias or field_name)
        return self._environ.get(name) or None, name, False

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for field_name, field in self.settings_cls.model_fields.items():
            value, name, _ = self.get_field_value(field, field_name)
            if value is not None:
                values[name] = value
        return values


class _FromEnvironment(BaseSettings):
    """Fields read from the environment only (see :meth:`settings_customise_sources`)."""

    model_config = SettingsConfigDict(
        case_sensitive=True,
        env_ignore_empty=True,
        extra="ignore",
        frozen=True,
        validate_default=True,
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment only: no .env file, no secrets directory. What the deployment sets
        # (compose, the Kubernetes ConfigMap and Secret) is all there is. load_settings(env)
        # swaps the process environment for its mapping, so a caller's mapping is never mixed
        # with os.environ.
        environ = _GIVEN_ENV.get()
        return (
            init_settings,
            _Environment(settings_cls, os.environ if environ is None else environ),
        )


class LimitSettings(_FromEnvironment):
    """The limits on submitted input (:func:`load_limits` reads these alone: ``little run``
    and ``little validate`` need no fleet settings)."""

    max_input_bytes: int = _env(
        "LITTLE_MAX_INPUT_BYTES",
        DEFAULT_MAX_INPUT_BYTES,
        "a whole number of bytes, 1 or more",
        ge=1,
    )
    max_lwir_bytes: int = _env(
        "LITTLE_MAX_LWIR_BYTES", DEFAULT_MAX_LWIR_BYTES, "a whole number of bytes, 1 or more", ge=1
    )
    max_steps: int = _env(
        "LITTLE_MAX_STEPS", DEFAULT_MAX_STEPS, "a whole number of steps, 1 or more", ge=1
    )
    max_json_depth: int = _env(
        "LITTLE_MAX_JSON_DEPTH",
        DEFAULT_MAX_JSON_DEPTH,
        f"a whole number of levels, 1 to {MAX_JSON_DEPTH_CEILING}",
        ge=1,
        le=MAX_JSON_DEPTH_CEILING,
    )

    @property
    def limits(self) -> InputLimits:
        """The limits on submitted input, for :mod:`little_dist.limits`."""
        return InputLimits(
            max_input_bytes=self.max_input_bytes,
            max_lwir_bytes=self.max_lwir_bytes,
            max_steps=self.max_steps,
            max_json_depth=self.max_json_depth,
        )


class QuotaSettings(_FromEnvironment):
    """The provider quotas (:func:`load_quota_settings` reads these alone: a model call in
    ``little run`` needs no fleet settings)."""

    quotas: str | None = _env(
        "LITTLE_QUOTAS",
        None,
        "quota rules as JSON, or the path of a JSON file (see little_dist.quotas.rules)",
    )
    quota_max_wait: float = _seconds("LITTLE_QUOTA_MAX_WAIT", 60.0, allow_zero=True)
    #: A fleet worker's model call whose quota wait is expected longer than this gives its
    #: slot back (the attempt ends ``quota_wait`` and runs again when the quota is expected).
    quota_give_back_after: float = _seconds("LITTLE_QUOTA_GIVE_BACK_AFTER", 2.0, allow_zero=True)
    quota_lease: float = _seconds("LITTLE_QUOTA_LEASE", 900.0)

    @field_validator("quotas")
    @classmethod
    def _check_quotas(cls, value: str | None) -> str | None:
        if value is not None:
            from little_dist.quotas.rules import QuotaConfigError, parse_quotas

            try:
                parse_quotas(value)
            except QuotaConfigError as exc:
                # Said as it is (not the field's description): which rule, which field, why.
                raise PydanticCustomError("quota_rules", "{reason}", {"reason": str(exc)}) from exc
        return value


class Settings(LimitSettings, QuotaSettings):
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
_SECRET_FIELDS: Final = frozenset({"aws_access_key_id", "aws_secret_access_key"})
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


def _problems_of(error: ValidationError) -> list[str]:
    problems: list[str] = []
    for detail in error.errors(include_url=False):
        loc = detail["loc"]
        if not loc:
            # The cross-field check: its message already holds finished lines.
            cause = detail.get("ctx", {}).get("error")
            problems.extend(str(cause if cause is not None else detail["msg"]).splitlines())
            continue
        env_name = str(loc[0])
        if detail["type"] == "quota_rules":
            problems.append(f"{env_name}={_shown(env_name, detail['input'])}: {detail['msg']}")
            continue
        field = _ENV_TO_FIELD.get(env_name)
        expected = Settings.model_fields[field].description if field else None
        problems.append(
            f"{env_name}={_shown(env_name, detail['input'])}: expected {expected or detail['msg']}"
        )
    return problems


def load_limits(env: Mapping[str, str] | None = None) -> InputLimits:
    """The limits on submitted input in ``env`` (default: the process environment), alone:
    other variables are not read. Raises :class:`SettingsError` for a bad limit.

    From the process environment, the limits its variables gave last are remembered (by
    their values, read again each time): a workflow tool checks every call's input with
    them, and reading the settings costs ~0.5 ms, which a turn of 1,000 calls felt."""
    if env is None:
        given = tuple(os.environ.get(name) for name in _LIMIT_VARIABLES)
        remembered = _LIMITS_SEEN.get(given)
        if remembered is None:
            remembered = _read_limits(None)
            if len(_LIMITS_SEEN) >= 8:
                _LIMITS_SEEN.clear()  # (a test that tries limits after limits)
            _LIMITS_SEEN[given] = remembered
        return remembered
    return _read_limits(env)


#: The variables :class:`LimitSettings` reads (its fields' names in the environment).
_LIMIT_VARIABLES: Final = tuple(
    str(field.validation_alias) for field in LimitSettings.model_fields.values()
)
#: What :func:`load_limits` read from the process environment, by those variables' values.
_LIMITS_SEEN: dict[tuple[str | None, ...], InputLimits] = {}


def _read_limits(env: Mapping[str, str] | None) -> InputLimits:
    token = _GIVEN_ENV.set(None if env is None else dict(env))
    try:
        return LimitSettings().limits
    except ValidationError as exc:
        raise SettingsError(_problems_of(exc)) from exc
    finally:
        _GIVEN_ENV.reset(token)


def load_quota_settings(env: Mapping[str, str] | None = None) -> QuotaSettings:
    """The quota settings in ``env`` (default: the process environment), alone; from the
    process environment remembered by their variables' values (a model call asks each
    time). Raises :class:`SettingsError` for a bad value."""
    given = _QUOTA_VARIABLES if env is None else ()
    values = tuple(os.environ.get(name) for name in given)
    if env is None and _QUOTAS_SEEN.get(values) is not None:
        return _QUOTAS_SEEN[values]
    token = _GIVEN_ENV.set(None if env is None else dict(env))
    try:
        found = QuotaSettings()
    except ValidationError as exc:
        raise SettingsError(_problems_of(exc)) from exc
    finally:
        _GIVEN_ENV.reset(token)
    if env is None:
        if len(_QUOTAS_SEEN) >= 8:
            _QUOTAS_SEEN.clear()
        _QUOTAS_SEEN[values] = found
    return found


_QUOTA_VARIABLES: Final = tuple(
    str(field.validation_alias) for field in QuotaSettings.model_fields.values()
)
_QUOTAS_SEEN: dict[tuple[str | None, ...], QuotaSettings] = {}


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """The settings in ``env`` (default: the process environment), checked.

    Raises :class:`SettingsError` listing every bad value, one line each.
    """
    token = _GIVEN_ENV.set(None if env is None else dict(env))
    try:
        return Settings()
    except ValidationError as exc:
        raise SettingsError(_problems_of(exc)) from exc
    finally:
        _GIVEN_ENV.reset(token)
