"""A worker whose Redis goes away: it reconnects, or it exits non-zero.

Real ``little worker`` processes against a private ``redis-server`` (the broker and the
world's Redis, as in compose) that the tests SIGKILL and start again; S3 is the session's
``weed mini``. A worker that ends with status 0 after losing Redis is the failure: no
supervisor restarts a process that says it finished.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import workflows_for_tests as wf
from tests.conftest_services import S3Service
from tests.fleet_processes import FleetEnv, FleetProcess, make_fleet_env, start_worker
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer.start_new(tmp_path)
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def private_fleet(
    redis_server: RedisServer, s3_service: S3Service, tmp_path: Path
) -> Iterator[FleetEnv]:
    fleet = make_fleet_env(redis_server.url(), s3_service, tmp_path)
    try:
        yield fleet
    finally:
        for process in fleet.processes:
            process.stop(timeout=5)
        if redis_server.process is not None and redis_server.process.poll() is None:
            fleet.close()


def _wait_for(check: object, what: str, worker: FleetProcess, timeout: float) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while not check():
        if not worker.alive():
            pytest.fail(
                f"the worker exited with status {worker.popen.returncode} while waiting for "
                f"{what}:\n{worker.output()[-4000:]}"
            )
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} in {timeout:g}s:\n{worker.output()[-4000:]}")
        time.sleep(0.1)


def test_a_worker_keeps_serving_after_its_redis_crashes_mid_step(
    private_fleet: FleetEnv, redis_server: RedisServer, tmp_path: Path
) -> None:
    side_effects = tmp_path / "side-effects.txt"
    worker = start_worker(
        private_fleet, concurrency=2, env={wf.SIDE_EFFECTS_ENV: str(side_effects)}
    )
    client = private_fleet.client()
    client.submit(wf.single_tool_lwir("record_branch", {"key": "slow", "sleep": 3}), {})
    # The step is running: its message is delivered and not acknowledged (acks_late).
    _wait_for(side_effects.exists, "running step", worker, timeout=30)

    redis_server.kill()
    time.sleep(1)
    redis_server.start()  # empty: nothing was saved

    after = private_fleet.client()
    run_id = after.submit(wf.chain_lwir(2), {})
    _wait_for(
        lambda: after.status(run_id).status == "completed",
        "completed run after the restart",
        worker,
        timeout=60,
    )
    assert worker.alive()


def test_a_worker_that_cannot_reach_redis_again_exits_non_zero(
    private_fleet: FleetEnv, redis_server: RedisServer
) -> None:
    worker = start_worker(
        private_fleet, concurrency=2, env={"LITTLE_BROKER_CONNECTION_MAX_RETRIES": "1"}
    )
    redis_server.kill()  # and it stays down
    deadline = time.monotonic() + 60
    while worker.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not worker.alive(), f"the worker is still running:\n{worker.output()[-4000:]}"
    assert worker.popen.returncode != 0, worker.output()[-4000:]
