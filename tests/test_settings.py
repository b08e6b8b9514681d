"""The fleet's settings: defaults, every variable parsed, every bad value reported, secrets."""

from __future__ import annotations

import time
from typing import Any

import pydantic
import pytest

from little_dist.errors import InvalidInputError
from little_dist.limits import InputLimits
from little_dist.settings import (
    KNOWN_ENV_VARS,
    ROLES,
    Settings,
    SettingsError,
    load_limits,
    load_settings,
    mask_url,
)

SECRET_KEY = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"
REDIS_PASSWORD = "hunter2-redis-pass"


def problems_for(env: dict[str, str]) -> tuple[str, ...]:
    with pytest.raises(SettingsError) as caught:
        load_settings(env)
    return caught.value.problems


def test_defaults() -> None:
    s = load_settings({})
    assert s.redis_url == "redis://127.0.0.1:6379/0"
    assert s.broker_url == s.redis_url
    assert s.world is None and s.app is None
    assert (s.s3_endpoint, s.s3_bucket, s.s3_region) == (None, None, None)
    assert s.aws_access_key_id is None and s.aws_secret_access_key is None
    assert s.queues == {
        "planner": "little.planner",
        "orchestrator": "little.orchestrator",
        "worker": "little.worker",
        "fixer": "little.fixer",
    }
    assert (s.worker_pool, s.worker_concurrency, s.worker_prefetch_multiplier) == ("threads", 4, 1)
    assert s.lease_ttl == 30.0 and s.heartbeat_interval == 10.0
    assert s.dispatch_resend_after == 60.0
    assert s.soft_shutdown_timeout == 60.0
    assert (s.task_soft_time_limit, s.task_time_limit) == (900.0, 960.0)
    assert s.broker_visibility_timeout == 3600.0
    assert s.broker_connection_max_retries == 100
    assert (s.signal_stream, s.signal_group, s.signal_claim_idle) == (
        "little:signals",
        "little-schedulers",
        60.0,
    )
    assert s.archive_ttl == 300
    assert s.max_branches_cap is None
    assert s.branch_window == "fleet"
    assert s.limits == InputLimits()
    assert (s.max_input_bytes, s.max_lwir_bytes) == (1024 * 1024, 1024 * 1024)
    assert (s.max_steps, s.max_json_depth) == (1000, 64)
    assert (s.run_cache_bytes, s.version_cache_bytes) == (256 * 1024 * 1024, 64 * 1024 * 1024)


def test_default_archive_ttl_matches_the_world() -> None:
    from little_dist.world.redis_s3 import DEFAULT_ARCHIVE_TTL_SECONDS

    assert load_settings({}).archive_ttl == DEFAULT_ARCHIVE_TTL_SECONDS


# env var -> (raw value, field, parsed value)
EVERY_VAR: dict[str, tuple[str, str, Any]] = {
    "LITTLE_REDIS_URL": ("redis://redis:6379/2", "redis_url", "redis://redis:6379/2"),
    "LITTLE_BROKER_URL": ("amqp://guest@rabbit//", "broker_url", "amqp://guest@rabbit//"),
    "LITTLE_WORLD": ("redis://redis:6379/2", "world", "redis://redis:6379/2"),
    "LITTLE_APP": ("examples.fleet_app:capabilities", "app", "examples.fleet_app:capabilities"),
    "LITTLE_S3_ENDPOINT": ("http://s3:8333", "s3_endpoint", "http://s3:8333"),
    "LITTLE_S3_BUCKET": ("little-artifacts", "s3_bucket", "little-artifacts"),
    "LITTLE_S3_REGION": ("eu-west-1", "s3_region", "eu-west-1"),
    "AWS_ACCESS_KEY_ID": (ACCESS_KEY, "aws_access_key_id", ACCESS_KEY),
    "AWS_SECRET_ACCESS_KEY": (SECRET_KEY, "aws_secret_access_key", SECRET_KEY),
    "LITTLE_QUEUE_PLANNER": ("t1.plan", "queue_planner", "t1.plan"),
    "LITTLE_QUEUE_ORCHESTRATOR": ("t1.orch", "queue_orchestrator", "t1.orch"),
    "LITTLE_QUEUE_WORKER": ("t1.work", "queue_worker", "t1.work"),
    "LITTLE_QUEUE_FIXER": ("t1.fix", "queue_fixer", "t1.fix"),
    "LITTLE_WORKER_POOL": ("prefork", "worker_pool", "prefork"),
    "LITTLE_WORKER_CONCURRENCY": ("16", "worker_concurrency", 16),
    "LITTLE_WORKER_PREFETCH_MULTIPLIER": ("2", "worker_prefetch_multiplier", 2),
    "LITTLE_WORKER_INLINE_STEPS": ("0", "worker_inline_steps", 0),
    "LITTLE_WORKER_INLINE_SECONDS": ("0.5", "worker_inline_seconds", 0.5),
    "LITTLE_WORKER_INLINE_MAX_SECONDS": ("60", "worker_inline_max_seconds", 60.0),
    "LITTLE_STEP_TIMEOUT": ("0", "step_timeout", 0.0),
    "LITTLE_LEASE_TTL": ("45", "lease_ttl", 45.0),
    "LITTLE_HEARTBEAT_INTERVAL": ("15.5", "heartbeat_interval", 15.5),
    "LITTLE_DISPATCH_RESEND_AFTER": ("120", "dispatch_resend_after", 120.0),
    "LITTLE_SOFT_SHUTDOWN_TIMEOUT": ("0", "soft_shutdown_timeout", 0.0),
    "LITTLE_TASK_SOFT_TIME_LIMIT": ("100", "task_soft_time_limit", 100.0),
    "LITTLE_TASK_TIME_LIMIT": ("200", "task_time_limit", 200.0),
    "LITTLE_BROKER_VISIBILITY_TIMEOUT": ("7200", "broker_visibility_timeout", 7200.0),
    "LITTLE_BROKER_CONNECTION_MAX_RETRIES": ("0", "broker_connection_max_retries", 0),
    "LITTLE_SIGNAL_STREAM": ("t1:signals", "signal_stream", "t1:signals"),
    "LITTLE_SIGNAL_GROUP": ("t1-schedulers", "signal_group", "t1-schedulers"),
    "LITTLE_SIGNAL_CLAIM_IDLE": ("30", "signal_claim_idle", 30.0),
    "LITTLE_ARCHIVE_TTL": ("0", "archive_ttl", 0.0),
    "LITTLE_ARCHIVE_DELAY": ("0.5", "archive_delay", 0.5),
    "LITTLE_MAX_BRANCHES_CAP": ("1000", "max_branches_cap", 1000),
    "LITTLE_BRANCH_WINDOW": ("declared", "branch_window", "declared"),
    "LITTLE_MAX_INPUT_BYTES": ("2048", "max_input_bytes", 2048),
    "LITTLE_MAX_LWIR_BYTES": ("4096", "max_lwir_bytes", 4096),
    "LITTLE_MAX_STEPS": ("50", "max_steps", 50),
    "LITTLE_MAX_JSON_DEPTH": ("256", "max_json_depth", 256),
    "LITTLE_RUN_CACHE_BYTES": ("1000000", "run_cache_bytes", 1_000_000),
    "LITTLE_VERSION_CACHE_BYTES": ("2000000", "version_cache_bytes", 2_000_000),
    "LITTLE_QUOTAS": ('{"rules": [{"requests": 5}]}', "quotas", '{"rules": [{"requests": 5}]}'),
    "LITTLE_QUOTA_MAX_WAIT": ("2.5", "quota_max_wait", 2.5),
    "LITTLE_QUOTA_GIVE_BACK_AFTER": ("0.5", "quota_give_back_after", 0.5),
    "LITTLE_QUOTA_LEASE": ("120", "quota_lease", 120.0),
    "LITTLE_METRICS_PORT": ("9464", "metrics_port", 9464),
    "LITTLE_CALLBACK_SECRET": ("whsec_c2VjcmV0", "callback_secret", "whsec_c2VjcmV0"),
    "LITTLE_CALLBACK_RETRY_FOR": ("30", "callback_retry_for", 30.0),
    "LITTLE_CALLBACK_BACKOFF": ("0.2", "callback_backoff", 0.2),
    "LITTLE_CALLBACK_TIMEOUT": ("3", "callback_timeout", 3.0),
    "LITTLE_SCHEDULE_POLL": ("0.5", "schedule_poll", 0.5),
}


def _plain(value: Any) -> Any:
    return value.get_secret_value() if isinstance(value, pydantic.SecretStr) else value


def test_every_variable_is_covered_here() -> None:
    assert set(EVERY_VAR) == KNOWN_ENV_VARS


def test_every_variable_parsed_together() -> None:
    s = load_settings({name: raw for name, (raw, _, _) in EVERY_VAR.items()})
    for name, (_, field, parsed) in EVERY_VAR.items():
        assert _plain(getattr(s, field)) == parsed, name


@pytest.mark.parametrize("name", sorted(EVERY_VAR))
def test_each_variable_parsed_alone(name: str) -> None:
    raw, field, parsed = EVERY_VAR[name]
    env = {name: raw}
    if name == "LITTLE_WORLD":
        env["LITTLE_S3_BUCKET"] = "little"
    if name == "LITTLE_HEARTBEAT_INTERVAL":
        env["LITTLE_LEASE_TTL"] = "60"
    if name in ("LITTLE_TASK_SOFT_TIME_LIMIT", "LITTLE_TASK_TIME_LIMIT"):
        env |= {"LITTLE_TASK_SOFT_TIME_LIMIT": "100", "LITTLE_TASK_TIME_LIMIT": "200"}
    assert _plain(getattr(load_settings(env), field)) == parsed


def test_the_broker_defaults_to_the_redis_url() -> None:
    assert load_settings(
        {"LITTLE_REDIS_URL": "rediss://r:6380/1?ssl_cert_reqs=required"}
    ).broker_url == ("rediss://r:6380/1?ssl_cert_reqs=required")


def test_empty_values_count_as_unset() -> None:
    s = load_settings({"LITTLE_LEASE_TTL": "", "LITTLE_S3_BUCKET": "", "LITTLE_BROKER_URL": ""})
    assert s.lease_ttl == 30.0 and s.s3_bucket is None and s.broker_url == s.redis_url


def test_unrelated_variables_are_ignored() -> None:
    assert load_settings({"PATH": "/bin", "LITTLE_SOMETHING_ELSE": "x"}) == load_settings({})


def test_reads_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"LITTLE_LEASE_TTL": "12", "LITTLE_HEARTBEAT_INTERVAL": "4", "LITTLE_QUEUE_FIXER": "f"}
    for name in KNOWN_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    from_process = load_settings()
    assert from_process == load_settings(env)
    assert (from_process.lease_ttl, from_process.queue_fixer) == (12.0, "f")

    monkeypatch.setenv("LITTLE_LEASE_TTL", "soon")
    with pytest.raises(SettingsError, match=r"LITTLE_LEASE_TTL='soon': expected"):
        load_settings()


def test_a_given_mapping_ignores_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITTLE_LEASE_TTL", "not a number")
    assert load_settings({}).lease_ttl == 30.0


# env var, bad value, what the message must say is expected
BAD_VALUES: list[tuple[str, str, str]] = [
    ("LITTLE_REDIS_URL", "http://redis:6379", "a Redis URL: redis://, rediss:// or unix://"),
    ("LITTLE_REDIS_URL", "redis-host:6379", "a Redis URL"),
    ("LITTLE_BROKER_URL", "kafka://k:9092", "a Celery broker URL"),
    ("LITTLE_WORLD", "s3://bucket/x", "a world spec"),
    ("LITTLE_APP", "my-app.py", "a dotted module path"),
    ("LITTLE_S3_ENDPOINT", "s3:8333", "an http:// or https:// URL"),
    ("LITTLE_S3_BUCKET", "My_Bucket", "an S3 bucket name"),
    ("LITTLE_S3_BUCKET", "ab", "an S3 bucket name"),
    ("LITTLE_S3_REGION", "EU West", "an S3 region"),
    ("LITTLE_QUEUE_PLANNER", "little planner", "a queue name"),
    ("LITTLE_QUEUE_ORCHESTRATOR", ".hidden", "a queue name"),
    ("LITTLE_QUEUE_WORKER", "a/b", "a queue name"),
    ("LITTLE_QUEUE_FIXER", "fix er", "a queue name"),
    ("LITTLE_WORKER_POOL", "gevent", "one of 'threads', 'prefork', 'solo'"),
    ("LITTLE_WORKER_CONCURRENCY", "0", "a whole number of task slots, 1 or more"),
    ("LITTLE_WORKER_CONCURRENCY", "2.5", "a whole number of task slots"),
    ("LITTLE_WORKER_PREFETCH_MULTIPLIER", "0", "a whole number, 1 or more"),
    ("LITTLE_WORKER_INLINE_STEPS", "-1", "a whole number of steps, 0 or more"),
    ("LITTLE_WORKER_INLINE_SECONDS", "soon", "a number of seconds, 0 or more"),
    ("LITTLE_LEASE_TTL", "thirty", "a number of seconds, greater than 0"),
    ("LITTLE_LEASE_TTL", "0", "a number of seconds, greater than 0"),
    ("LITTLE_HEARTBEAT_INTERVAL", "-1", "a number of seconds, greater than 0"),
    ("LITTLE_HEARTBEAT_INTERVAL", "nan", "a number of seconds, greater than 0"),
    ("LITTLE_DISPATCH_RESEND_AFTER", "inf", "a number of seconds, greater than 0"),
    ("LITTLE_SOFT_SHUTDOWN_TIMEOUT", "-5", "a number of seconds, 0 or more"),
    ("LITTLE_TASK_SOFT_TIME_LIMIT", "1m", "a number of seconds, greater than 0"),
    ("LITTLE_TASK_TIME_LIMIT", "0", "a number of seconds, greater than 0"),
    ("LITTLE_BROKER_VISIBILITY_TIMEOUT", "1h", "a number of seconds, greater than 0"),
    ("LITTLE_BROKER_CONNECTION_MAX_RETRIES", "-1", "a whole number of retries, 0 or more"),
    ("LITTLE_SIGNAL_STREAM", "little signals", "a Redis stream key without spaces"),
    ("LITTLE_SIGNAL_GROUP", "my group", "a consumer group name without spaces"),
    ("LITTLE_SIGNAL_CLAIM_IDLE", "0", "a number of seconds, greater than 0"),
    ("LITTLE_ARCHIVE_TTL", "-1", "a number of seconds, 0 or more"),
    ("LITTLE_ARCHIVE_DELAY", "soon", "a number of seconds, 0 or more"),
    ("LITTLE_MAX_BRANCHES_CAP", "50", "a whole number of parallel branches, 100 or more"),
    ("LITTLE_BRANCH_WINDOW", "slots", "'fleet' (at most the workers' slots in flight)"),
    ("LITTLE_MAX_INPUT_BYTES", "0", "a whole number of bytes, 1 or more"),
    ("LITTLE_MAX_LWIR_BYTES", "1MB", "a whole number of bytes, 1 or more"),
    ("LITTLE_MAX_STEPS", "-3", "a whole number of steps, 1 or more"),
    ("LITTLE_MAX_JSON_DEPTH", "257", "a whole number of levels, 1 to 256"),
    ("LITTLE_RUN_CACHE_BYTES", "lots", "a whole number of bytes, 1 or more"),
    ("LITTLE_VERSION_CACHE_BYTES", "0", "a whole number of bytes, 1 or more"),
    ("LITTLE_QUOTA_MAX_WAIT", "-1", "a number of seconds, 0 or more"),
    ("LITTLE_QUOTA_GIVE_BACK_AFTER", "soon", "a number of seconds, 0 or more"),
    ("LITTLE_QUOTA_LEASE", "0", "a number of seconds, greater than 0"),
    ("LITTLE_METRICS_PORT", "70000", "a TCP port (1-65535) to serve /metrics on"),
]


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    BAD_VALUES,
    ids=[f"{name}={value}" for name, value, _ in BAD_VALUES],
)
def test_each_bad_value_has_its_own_line(name: str, value: str, expected: str) -> None:
    (line,) = problems_for({name: value})
    assert line.startswith(f"{name}={value!r}: expected {expected}")


def test_every_bad_value_is_reported_at_once() -> None:
    env = {
        "LITTLE_LEASE_TTL": "thirty",
        "LITTLE_WORKER_POOL": "gevent",
        "LITTLE_S3_BUCKET": "Bad",
        "LITTLE_REDIS_URL": "http://x",
    }
    with pytest.raises(SettingsError) as caught:
        load_settings(env)
    error = caught.value
    assert isinstance(error, InvalidInputError)
    assert sorted(line.split("=", 1)[0] for line in error.problems) == sorted(env)
    lines = str(error).splitlines()
    assert lines[0] == "4 invalid settings in the environment:"
    assert lines[1:] == list(error.problems)


CROSS_FIELD: list[tuple[dict[str, str], str]] = [
    (
        {"LITTLE_LEASE_TTL": "10", "LITTLE_HEARTBEAT_INTERVAL": "10"},
        "LITTLE_HEARTBEAT_INTERVAL=10.0: expected less than LITTLE_LEASE_TTL (10.0)",
    ),
    (
        {"LITTLE_TASK_SOFT_TIME_LIMIT": "960"},
        "LITTLE_TASK_SOFT_TIME_LIMIT=960.0: expected less than LITTLE_TASK_TIME_LIMIT (960.0)",
    ),
    (
        {"LITTLE_TASK_TIME_LIMIT": "4000", "LITTLE_TASK_SOFT_TIME_LIMIT": "3000"},
        "LITTLE_TASK_TIME_LIMIT=4000.0: expected less than LITTLE_BROKER_VISIBILITY_TIMEOUT",
    ),
    (
        {"LITTLE_QUEUE_FIXER": "little.worker"},
        "LITTLE_QUEUE_FIXER='little.worker': expected a queue of its own "
        "(LITTLE_QUEUE_WORKER names the same one)",
    ),
    (
        {"LITTLE_WORLD": "redis://redis:6379/0"},
        "LITTLE_S3_BUCKET=(unset): expected a bucket name, because LITTLE_WORLD=",
    ),
]


@pytest.mark.parametrize(
    ("env", "start"), CROSS_FIELD, ids=[start.split("=", 1)[0] for _, start in CROSS_FIELD]
)
def test_values_that_do_not_fit_together(env: dict[str, str], start: str) -> None:
    (line,) = problems_for(env)
    assert line.startswith(start)


def test_a_world_on_disk_needs_no_bucket() -> None:
    assert load_settings({"LITTLE_WORLD": "/var/lib/little"}).world == "/var/lib/little"


def test_queue_for() -> None:
    s = load_settings({"LITTLE_QUEUE_WORKER": "tenant-a.worker"})
    assert [s.queue_for(role) for role in ROLES] == [
        "little.planner",
        "little.orchestrator",
        "tenant-a.worker",
        "little.fixer",
    ]
    with pytest.raises(InvalidInputError, match="Unknown role 'janitor'"):
        s.queue_for("janitor")  # type: ignore[arg-type]


def test_settings_are_frozen() -> None:
    s = load_settings({})
    with pytest.raises(pydantic.ValidationError):
        s.lease_ttl = 1.0  # type: ignore[misc]


# -- secrets ---------------------------------------------------------------------------------

SECRET_ENV = {
    "AWS_ACCESS_KEY_ID": ACCESS_KEY,
    "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
    "LITTLE_REDIS_URL": f"redis://:{REDIS_PASSWORD}@redis:6379/0",
    "LITTLE_WORLD": f"redis://little:{REDIS_PASSWORD}@redis:6379/0",
    "LITTLE_BROKER_URL": f"redis://:{REDIS_PASSWORD}@redis:6379/1",
    "LITTLE_S3_BUCKET": "little",
}
SECRETS = (SECRET_KEY, ACCESS_KEY, REDIS_PASSWORD)


def test_secrets_never_in_repr_or_str() -> None:
    s = load_settings(SECRET_ENV)
    for text in (repr(s), str(s)):
        for secret in SECRETS:
            assert secret not in text
        assert "redis://:**********@redis:6379/0" in text
    # ... while the values themselves are intact for the code that needs them
    assert s.aws_secret_access_key is not None
    assert s.aws_secret_access_key.get_secret_value() == SECRET_KEY
    assert s.redis_url == SECRET_ENV["LITTLE_REDIS_URL"]


def test_secrets_never_in_error_messages() -> None:
    env = SECRET_ENV | {
        # bad values next to the secrets, and secrets inside bad values
        "LITTLE_REDIS_URL": f"http://:{REDIS_PASSWORD}@redis:6379/0",
        "LITTLE_BROKER_URL": f"kafka://user:{REDIS_PASSWORD}@k:9092",
        "LITTLE_WORLD": f"s3://:{REDIS_PASSWORD}@x/y",
        "LITTLE_LEASE_TTL": "soon",
    }
    with pytest.raises(SettingsError) as caught:
        load_settings(env)
    message = str(caught.value)
    assert len(caught.value.problems) == 4
    for secret in SECRETS:
        assert secret not in message
        assert secret not in repr(caught.value)
    assert "LITTLE_BROKER_URL='kafka://user:**********@k:9092': expected" in message


def test_secrets_masked_in_cross_field_messages() -> None:
    env = {"LITTLE_WORLD": f"redis://:{REDIS_PASSWORD}@redis:6379/0"}
    (line,) = problems_for(env)
    assert REDIS_PASSWORD not in line
    assert "LITTLE_WORLD='redis://:**********@redis:6379/0'" in line


def test_the_validation_error_is_not_carried_along_with_secrets() -> None:
    # The pydantic error is the cause (for debugging) but the message a user sees is ours.
    with pytest.raises(SettingsError) as caught:
        load_settings({"LITTLE_LEASE_TTL": "x", "AWS_SECRET_ACCESS_KEY": SECRET_KEY})
    assert SECRET_KEY not in str(caught.value)
    assert SECRET_KEY not in str(caught.value.__cause__)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@h:6379/0", "redis://:**********@h:6379/0"),
        ("redis://user:pw@h/0", "redis://user:**********@h/0"),
        ("redis://h:6379/0", "redis://h:6379/0"),
        ("redis://user@h/0", "redis://user@h/0"),
        ("/var/lib/little", "/var/lib/little"),
    ],
)
def test_mask_url(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_settings_is_the_pydantic_settings_model() -> None:
    from pydantic_settings import BaseSettings

    assert issubclass(Settings, BaseSettings)
    assert {str(f.validation_alias) for f in Settings.model_fields.values()} == KNOWN_ENV_VARS


def test_load_limits_reads_the_limits_alone() -> None:
    # little run and little validate read the limits without the fleet's settings: a bad
    # fleet variable is none of their business, a bad limit is.
    limits = load_limits({"LITTLE_MAX_STEPS": "7", "LITTLE_WORKER_POOL": "gevent"})
    assert limits == InputLimits(max_steps=7)
    with pytest.raises(SettingsError) as caught:
        load_limits({"LITTLE_MAX_JSON_DEPTH": "0"})
    assert caught.value.problems == (
        "LITTLE_MAX_JSON_DEPTH='0': expected a whole number of levels, 1 to 256",
    )


def test_load_limits_reads_the_process_environment_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LITTLE_MAX_INPUT_BYTES", "99")
    assert load_limits().max_input_bytes == 99


def test_load_limits_from_the_process_environment_costs_little_and_follows_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A workflow tool checks each call's input with load_limits(): a model turn of 1,000
    # calls read the settings 1,000 times (~0.5 ms each). What a variable's value gave is
    # remembered, and a changed (or bad) value is read again.
    for name in ("LITTLE_MAX_INPUT_BYTES", "LITTLE_MAX_LWIR_BYTES", "LITTLE_MAX_JSON_DEPTH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LITTLE_MAX_STEPS", "7")
    assert load_limits() == InputLimits(max_steps=7)
    started = time.perf_counter()
    for _ in range(1000):
        load_limits()
    assert time.perf_counter() - started < 0.1
    monkeypatch.setenv("LITTLE_MAX_STEPS", "8")
    assert load_limits() == InputLimits(max_steps=8)
    monkeypatch.setenv("LITTLE_MAX_STEPS", "0")
    with pytest.raises(SettingsError):
        load_limits()
    with pytest.raises(SettingsError):
        load_limits()
    monkeypatch.delenv("LITTLE_MAX_STEPS")
    assert load_limits() == InputLimits()
