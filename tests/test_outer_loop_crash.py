"""A real process driving an outer loop is SIGKILLed right after the supervisor's decision for
cycle 1 was recorded (``OuterLoopCycleCompleted`` on the cycle's run) and before the manifest
said so. Started again with the loop's id, a new process finishes the loop without asking the
supervisor about cycle 1 again and without planning or running cycle 1 again: the scripted
model's call log, shared by both processes, counts every planner and supervisor call. On
LocalWorld and on RedisS3World (real Redis, real S3)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from little_dist.planner.request import PRIOR_CYCLE_NOTE_SEPARATOR
from little_dist.testing import ScriptedModel, read_call_log
from little_dist.world import open_world
from tests import zygote
from tests.conftest_services import S3Service
from tests.outer_loop_helpers import simple_lwir

LOOP = "ol_crash_after_decision"
ROOT = Path(__file__).resolve().parent.parent


def script(tmp_path: Path) -> tuple[Path, Path]:
    calls = tmp_path / "calls.jsonl"
    model = ScriptedModel(call_log=calls)
    model.on(step="planner").reply_json(simple_lwir(), times=None)
    # Each process has its own copy of the replies: route by what the supervisor is shown.
    model.on(step="supervisor", contains='"cycleNumber":2').reply_json(
        {"kind": "done", "finalOutput": {"result": "finished in cycle 2"}}, times=None
    )
    model.on(step="supervisor").reply_json(
        {"kind": "continue", "promptNote": "plan it again"}, times=None
    )
    return model.save(tmp_path / "script.json"), calls


def run_app(spec: str, script_file: Path, env: dict[str, str], *flags: str) -> Any:
    # `python -m tests.outer_loop_crash_app ...`, forked from the test zygote (tests/zygote.py)
    return zygote.run(
        [spec, str(script_file), LOOP, *flags],
        module="tests.outer_loop_crash_app",
        cwd=ROOT,
        env=env,
        timeout=120,
    )


def calls_of(calls: Path, step: str) -> list[dict[str, Any]]:
    return [
        record
        for record in read_call_log(calls)
        if record.get("metadata", {}).get("little", {}).get("stepPath") == step
    ]


@pytest.fixture(params=["local", pytest.param("redis_s3", marks=pytest.mark.integration)])
def world_spec(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LITTLE_")}
    if request.param == "local":
        return str(tmp_path / "data"), env
    redis_url: str = request.getfixturevalue("redis_url")
    prefix: str = request.getfixturevalue("redis_key_prefix") + f"{tmp_path.name}:"
    s3: S3Service = request.getfixturevalue("s3_service")
    env.update(
        {
            "LITTLE_S3_ENDPOINT": s3.endpoint,
            "LITTLE_S3_BUCKET": s3.bucket,
            "LITTLE_S3_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": s3.access_key_id,
            "AWS_SECRET_ACCESS_KEY": s3.secret_access_key,
        }
    )
    return f"{redis_url}?key_prefix={prefix}&s3_prefix={s3.prefix}{tmp_path.name}/", env


def test_a_loop_killed_after_the_decision_resumes_without_asking_again(
    tmp_path: Path, world_spec: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, env = world_spec
    script_file, calls = script(tmp_path)

    killed = run_app(spec, script_file, env, "--die")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(calls_of(calls, "supervisor")) == 1
    for key, value in env.items():
        if key.startswith(("LITTLE_", "AWS_")):
            monkeypatch.setenv(key, value)
    world = open_world(spec)
    try:
        from little_dist.outer_loop import manifest_store_for

        stored = manifest_store_for(world).read(LOOP)
        assert stored is not None
        cycle1 = stored.manifest.pending_cycle_run_id
        assert cycle1 is not None and stored.manifest.cycles == ()  # the manifest never knew
        decided = [e for e in world.list_events(cycle1) if e.type == "OuterLoopCycleCompleted"]
        assert [e.payload["supervise"] for e in decided] == [
            {"kind": "continue", "promptNote": "plan it again"}
        ]

        resumed = run_app(spec, script_file, env)
        assert resumed.returncode == 0, resumed.stderr
        assert json.loads(resumed.stdout)["output"] == {"result": "finished in cycle 2"}

        supervisor = calls_of(calls, "supervisor")
        planner = calls_of(calls, "planner")
        assert len(supervisor) == 2  # cycle 1 (killed process), cycle 2 (resumed): once each
        assert len(planner) == 2  # cycle 1 was not planned again
        assert '"cycleNumber":2' in supervisor[1]["messages"][-1]["content"]
        assert PRIOR_CYCLE_NOTE_SEPARATOR + "plan it again" in planner[1]["messages"][0]["content"]
        decided = [e for e in world.list_events(cycle1) if e.type == "OuterLoopCycleCompleted"]
        assert len(decided) == 1
        final = manifest_store_for(world).read(LOOP)
        assert final is not None and final.manifest.done
        assert final.manifest.cycles[0].run_id == cycle1
        assert final.manifest.cycles[0].summary == "plan it again"
        assert final.manifest.pending_cycle_run_id is None
    finally:
        world.close()
