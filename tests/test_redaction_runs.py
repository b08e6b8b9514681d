"""Runs whose model and tool calls fail with credentials in the error keep them out of
everything: events, stored bytes, the S3 archive, ``little report`` (table, JSON, HTML),
``little events``/``status``, the CLI's output, and the worker's log.

The scripted provider raises ``AuthenticationError`` holding an OpenAI-style key, an
``Authorization: Bearer`` header and a Google key in a URL; the ``leak`` tool raises with a
Redis password URL and ``api_key=``; the planner's model call fails the same way
(:mod:`tests.secrets_app`). Each check also finds the ``[REDACTED]`` marker where the error
was, so it is not passing because nothing was written.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from little_dist.redaction import REDACTED
from tests import secrets_app, zygote
from tests.fleet_processes import ROOT, FleetEnv, fleet_env, start_worker

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

APP = "tests.secrets_app"


def assert_clean(where: str, text: str | bytes) -> None:
    data = text.encode() if isinstance(text, str) else text
    for secret in secrets_app.SECRETS:
        assert secret.encode() not in data, f"{where} holds {secret[:12]}..."


def little(
    *args: str, env: dict[str, str], timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    return zygote.run(args, cwd=ROOT, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def script_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path: Path = secrets_app.build_script().save(tmp_path_factory.mktemp("script") / "s.json")
    return path


def _write(path: Path, value: Any) -> str:
    path.write_text(json.dumps(value), encoding="utf-8")
    return str(path)


def _failure_messages(events: Iterable[dict[str, Any]]) -> list[str]:
    return [
        str(e["payload"]["error"]["message"])
        for e in events
        if isinstance(e.get("payload"), dict) and isinstance(e["payload"].get("error"), dict)
    ]


def _read_back(run_id: str, env: dict[str, str], where: list[str], tmp: Path) -> list[str]:
    """``little events --json``, ``little report`` as a table, as JSON and as HTML: every
    text, each checked clean; returns the failure messages of the run's events."""
    events = little("events", run_id, "--json", *where, env=env)
    assert events.returncode == 0, events.stderr
    assert_clean(f"little events {run_id}", events.stdout + events.stderr)
    for form in ([], ["--json"]):
        report = little("report", run_id, *form, *where, env=env)
        assert report.returncode == 0, report.stderr
        assert_clean(f"little report {run_id} {form}", report.stdout + report.stderr)
    html = tmp / f"{run_id}.html"
    report = little("report", run_id, "--html", str(html), *where, env=env)
    assert report.returncode == 0, report.stderr
    assert_clean(f"little report {run_id} --html", html.read_text(encoding="utf-8"))
    return _failure_messages(json.loads(line) for line in events.stdout.splitlines())


# -- in process, LocalWorld ----------------------------------------------------------------------


@pytest.mark.slow
def test_a_local_run_keeps_credentials_out_of_events_storage_report_and_output(
    tmp_path: Path, script_file: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITTLE_SCRIPTED_MODEL": str(script_file)}
    env.pop("LITTLE_WORLD", None)
    data = tmp_path / "world"
    where = ["--data-dir", str(data)]
    runs = {
        "run_secrets_model": _write(tmp_path / "model.json", secrets_app.model_lwir()),
        "run_secrets_tool": _write(tmp_path / "tool.json", secrets_app.tool_lwir()),
    }
    for run_id, lwir in runs.items():
        result = little("run", lwir, "--app", APP, "--run-id", run_id, *where, env=env)
        assert result.returncode == 1, result.stderr
        assert_clean(f"little run {run_id}", result.stdout + result.stderr)
        assert REDACTED in result.stderr, result.stderr

        messages = _read_back(run_id, env, where, tmp_path)
        assert messages and all(REDACTED in message for message in messages), messages

    planned = little(
        "run", f"{APP}:planned", "--input", '{"question": "hi"}', "--run-id", "run_secrets_plan",
        *where, env=env,
    )  # fmt: skip
    assert planned.returncode == 1, planned.stderr
    assert_clean("little run (planner)", planned.stdout + planned.stderr)
    assert REDACTED in planned.stderr, planned.stderr
    events = little("events", "run_secrets_plan", "--json", *where, env=env)
    assert_clean("little events (planner)", events.stdout + events.stderr)
    messages = _failure_messages(json.loads(line) for line in events.stdout.splitlines())
    assert messages and all(REDACTED in message for message in messages), messages

    # Every byte the world stored: the SQLite log (and its WAL), artifacts, versions.
    stored = [path for path in data.rglob("*") if path.is_file()]
    assert any(path.name == "events.db" for path in stored)
    for path in stored:
        assert_clean(str(path.relative_to(data)), path.read_bytes())


# -- on the fleet, RedisS3World ------------------------------------------------------------------


def _redis_dump(fleet: FleetEnv) -> bytes:
    """Every value under the fleet's key prefix, whatever its type."""
    import redis

    client = redis.Redis.from_url(fleet.redis_url)
    parts: list[bytes] = []
    try:
        for key in client.scan_iter(match=f"{fleet.key_prefix}*", count=1000):
            kind = client.type(key).decode()
            if kind == "string":
                parts.append(client.get(key) or b"")
            elif kind == "stream":
                for _, fields in client.xrange(key):
                    parts += [*fields.keys(), *fields.values()]
            elif kind == "hash":
                parts += [v for pair in client.hgetall(key).items() for v in pair]
            elif kind == "list":
                parts += client.lrange(key, 0, -1)
            elif kind in ("set", "zset"):
                parts += list(client.smembers(key) if kind == "set" else client.zrange(key, 0, -1))
    finally:
        client.close()
    return b"\n".join(parts)


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_fleet_runs_keep_credentials_out_of_redis_the_archive_the_cli_and_the_log(
    fleet_env: FleetEnv, script_file: Path, tmp_path: Path
) -> None:
    from tests.s3_server import s3_client

    fleet_env.env["LITTLE_SCRIPTED_MODEL"] = str(script_file)
    worker = start_worker(fleet_env, app=APP)
    env = fleet_env.env

    run_ids = []
    for name, lwir in (("model", secrets_app.model_lwir()), ("tool", secrets_app.tool_lwir())):
        run_id = f"run_secrets_fleet_{name}"
        submitted = little(
            "submit", _write(tmp_path / f"{name}.json", lwir), "--input", "{}",
            "--run-id", run_id, "--wait", "--timeout", "60", env=env,
        )  # fmt: skip
        assert submitted.returncode == 1, submitted.stderr
        assert_clean(f"little submit {run_id}", submitted.stdout + submitted.stderr)
        assert REDACTED in submitted.stderr, submitted.stderr
        status = little("status", run_id, "--json", env=env)
        assert_clean(f"little status {run_id}", status.stdout + status.stderr)
        run_ids.append(run_id)

    # The planner's model call fails inside the little.plan task, which records the run's
    # failure and logs the error with its traceback, the provider's original exception
    # included.
    planned = little(
        "submit", "secrets.planned", "--app", APP, "--input", '{"question": "hi"}',
        "--run-id", "run_secrets_fleet_plan", env=env,
    )  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    deadline = time.monotonic() + 60
    while "plan run_secrets_fleet_plan: planning failed" not in worker.output():
        assert time.monotonic() < deadline, worker.output()[-4000:]
        assert worker.alive(), worker.output()[-4000:]
        time.sleep(0.2)

    world = fleet_env.world()
    for run_id in [*run_ids, "run_secrets_fleet_plan"]:
        events = [event.to_json() for event in world.list_events(run_id)]
        assert_clean(f"events of {run_id}", json.dumps(events))
        messages = _failure_messages(events)
        assert messages and all(REDACTED in message for message in messages), (run_id, messages)

    for run_id in run_ids:
        world.archive_run(run_id)  # type: ignore[attr-defined]
    s3 = s3_client(fleet_env.s3.endpoint)
    prefix = f"{fleet_env.s3.prefix}"
    archives = [
        item["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=fleet_env.s3.bucket, Prefix=prefix
        )
        for item in page.get("Contents", [])
        if "/archives/" in item["Key"] and item["Key"].rsplit("/", 1)[-1][:-7] in run_ids
    ]
    assert len(archives) == len(run_ids), archives
    for key in archives:
        body = s3.get_object(Bucket=fleet_env.s3.bucket, Key=key)["Body"].read()
        assert_clean(key, body)
        assert REDACTED.encode() in body

    for run_id in run_ids:
        messages = _read_back(run_id, env, [], tmp_path)
        assert messages and all(REDACTED in message for message in messages)

    assert_clean("Redis", _redis_dump(fleet_env))
    log = worker.output()
    assert_clean("the worker's log", log)
    assert "Traceback" in log and REDACTED in log, log[-4000:]


def test_the_check_above_would_see_a_secret() -> None:
    # Guards the helper every assertion above relies on.
    with pytest.raises(AssertionError):
        assert_clean("probe", f"xx {secrets_app.OPENAI_KEY} yy")
    with pytest.raises(AssertionError):
        assert_clean("probe", secrets_app.TOOL_ERROR.encode())
