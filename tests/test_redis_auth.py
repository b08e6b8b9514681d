"""The Redis of compose, as configured: ``storage/redis-start.sh`` with ``storage/redis.conf``.

A private server started the way the compose service starts it (only the port, the data
directory and the bind address differ): a client that does not log in can do
nothing, the default user is off, the fleet's user cannot run administrative commands, the
ACL file holds no password, and a fleet logged in as that user runs a workflow.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import workflows_for_tests as wf
from tests.conftest_services import S3Service
from tests.fleet_processes import ROOT, make_fleet_env, start_scheduler, start_worker
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PASSWORD = "9f2c41d8e0b7a6354c1e8d2f0a9b7c6e5d4c3b2a"


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    acl = tmp_path / "acl" / "users.acl"
    # redis-server changes to `dir` while it reads the file (/data, the compose volume):
    # the copy differs in that line only.
    conf = tmp_path / "redis.conf"
    lines = (ROOT / "storage" / "redis.conf").read_text(encoding="utf-8").splitlines()
    conf.write_text(
        "\n".join(f"dir {tmp_path}" if line == "dir /data" else line for line in lines),
        encoding="utf-8",
    )
    server = RedisServer.start_new(
        tmp_path,
        launcher=["sh", str(ROOT / "storage" / "redis-start.sh")],
        env={
            "LITTLE_REDIS_PASSWORD": PASSWORD,
            "LITTLE_REDIS_CONF": str(conf),
            "LITTLE_REDIS_ACL": str(acl),
        },
    )
    try:
        yield server
    finally:
        server.kill()


def test_only_the_fleet_user_gets_in_and_it_cannot_reconfigure_redis(
    redis_server: RedisServer,
) -> None:
    import redis

    anonymous = redis.Redis(port=redis_server.port, socket_timeout=5)
    with pytest.raises(redis.exceptions.RedisError, match=r"(?i)auth"):
        anonymous.ping()
    with pytest.raises(redis.exceptions.RedisError, match=r"(?i)WRONGPASS|invalid"):
        redis.Redis(port=redis_server.port, password=PASSWORD, socket_timeout=5).ping()
    with pytest.raises(redis.exceptions.RedisError, match=r"(?i)WRONGPASS|invalid"):
        redis.Redis(port=redis_server.port, username="little", password="guess").ping()

    fleet = redis.Redis.from_url(redis_server.url(user="little", password=PASSWORD))
    assert fleet.ping()
    assert fleet.set("little-test:k", "v") and fleet.get("little-test:k") == b"v"
    for admin in (
        ("CONFIG", "SET", "maxmemory", "0"),
        ("ACL", "SETUSER", "intruder", "on"),
        ("SHUTDOWN",),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            fleet.execute_command(*admin)
    for client in (anonymous, fleet):
        client.close()

    acl = Path(redis_server.env["LITTLE_REDIS_ACL"]).read_text(encoding="utf-8")
    assert "user default off" in acl and PASSWORD not in acl
    assert (Path(redis_server.env["LITTLE_REDIS_ACL"]).stat().st_mode & 0o077) == 0


def test_a_fleet_logged_in_as_the_fleet_user_runs_a_workflow(
    redis_server: RedisServer, s3_service: S3Service, tmp_path: Path
) -> None:
    url = redis_server.url(user="little", password=PASSWORD)
    fleet = make_fleet_env(url, s3_service, tmp_path)
    try:
        worker = start_worker(fleet, concurrency=2)
        scheduler = start_scheduler(fleet)
        client = fleet.client()
        run_id = client.submit(
            wf.fan_out_lwir(max_concurrency=2), {"keys": ["a", "b", "c"], "sleep": 0}
        )
        state = client.wait(run_id, timeout=60)
        assert state.status == "completed", worker.output()[-3000:]
        for process in (worker, scheduler):
            assert process.alive()
            assert PASSWORD not in process.output()
    finally:
        fleet.close()
