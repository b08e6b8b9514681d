"""The end of a run seals its log, on the fleet: a step in flight when the run is cancelled
commits nothing after ``RunFailed``, ``little status`` shows no running step, and what the
step's model call in flight is taken to have spent (it is abandoned at the end: its prompt's
tokens) is still counted by ``little report`` and ``little status``.

Real ``little worker`` processes on Redis and ``weed mini``; the step is a scripted model
call, cancelled while it runs: the call is held (``tests.fleet_app``'s model hold) until the
test has cancelled the run, and seen it archived. A fixed latency of 5 s was not enough on a
busy machine: ``little cancel`` took longer to start, and the step had ended.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests import fleet_app, zygote
from tests.fleet_processes import (
    ROOT,
    FleetEnv,
    fleet_env,
    start_scheduler,
    start_worker,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

THINK_LATENCY = 0.5
STEP = "fan[a].think"


def little(fleet: FleetEnv, *args: str) -> subprocess.CompletedProcess[str]:
    return zygote.run(args, cwd=ROOT, env=fleet.env, timeout=60)


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


@pytest.mark.parametrize("archived", [False, True], ids=["live", "archived-first"])
def test_a_step_in_flight_when_the_run_is_cancelled_commits_nothing_after_the_end(
    fleet_env: FleetEnv, tmp_path: Path, archived: bool
) -> None:
    import redis

    script = fleet_app.build_script(think_latency=THINK_LATENCY).save(tmp_path / "script.json")
    release = tmp_path / "release-the-model-call"
    fleet_env.env.update(
        {
            "LITTLE_SCRIPTED_MODEL": str(script),
            "LITTLE_ARCHIVE_DELAY": "0",
            fleet_app.HOLD_MODEL_ENV: str(release),
        }
    )
    start_worker(fleet_env, roles=["worker"], app="tests.fleet_app")
    if archived:
        # The scheduler archives the run as soon as it ends, before the late commit comes.
        start_scheduler(fleet_env)
    world = fleet_env.world()
    with fleet_env.client(world=world) as client:
        run_id = client.submit(fleet_app.model500, {"keys": ["a"]})

        def model_called() -> bool:
            return any(e.type == "harness.model.called" for e in client.events(run_id))

        wait_for(model_called, 40, "the model call to start")
        cancelled = little(fleet_env, "cancel", run_id, "--wait", "--timeout", "30")
        assert cancelled.returncode == 0, cancelled.stderr
        assert cancelled.stdout.strip() == f"run {run_id} cancelled"

        # The step's lease goes when its attempt is over: committed, or refused.
        lease = f"{fleet_env.key_prefix}lease:{{{run_id}}}:step:{STEP}"
        marker = f"{fleet_env.key_prefix}{{{run_id}}}:archived"
        probe = redis.Redis.from_url(fleet_env.redis_url)
        try:
            if archived:
                # (The attempt abandons its call when the run ends, so its late record may
                # come before or after the archive: either way it goes to the late record.)
                wait_for(lambda: probe.exists(marker), 20, "the run's archive")
            release.touch()  # the call in flight answers now, after the end
            wait_for(lambda: not probe.exists(lease), THINK_LATENCY + 20, "the step to end")
        finally:
            probe.close()

        events = list(client.events(run_id))
        types = [event.type for event in events]
        assert types[-1] == "RunFailed", types[types.index("RunFailed") :]
        assert types.count("RunFailed") == 1
        # The call in flight was abandoned at the end (its attempt stopped waiting for it):
        # nothing of it is in the log, and what it is taken to have spent (its prompt's
        # tokens) is in the run's late record.
        assert not any(e.type == "harness.model.responded" for e in events)
        # (the attempt writes its late record as it stops, around when its lease goes)
        wait_for(lambda: bool(world.late_events(run_id)), 20, "the late record")
        late = world.late_events(run_id)
        assert [record.type for record in late] == ["harness.model.failed"]
        assert late[0].payload["error"]["interrupted"] is True
        spent = late[0].payload["error"]["usage"]["inputTokens"]
        assert spent > 0

    status = little(fleet_env, "status", run_id, "--json")
    view = json.loads(status.stdout)
    assert "running" not in view["steps"].values(), view["steps"]
    assert view["steps"][STEP] == "interrupted"
    text = little(fleet_env, "status", run_id)
    assert "running" not in text.stdout, text.stdout

    report = json.loads(little(fleet_env, "report", run_id, "--json").stdout)
    assert report["total"]["inputTokens"] == spent
    assert report["late"]["inputTokens"] == spent
    assert report["late"]["pricedCalls"] + report["late"]["unpricedCalls"] == 1
