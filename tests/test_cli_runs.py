"""``little runs`` on both worlds: every run, newest first, with workflow, status, start,
duration and cost; ``--status``, ``--workflow``, ``--limit`` and ``--json``.

The LocalWorld's runs are made by ``little run`` and by appends; the fleet world's by appends
to a RedisS3World (one of them archived to S3 and its stream deleted) — the listing reads
only what the world keeps, whoever wrote it.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from little_dist.events import EventInput
from little_dist.world.base import World
from little_dist.world.local import LocalWorld
from tests import workflows_for_tests as wf
from tests import zygote
from tests.fleet_processes import ROOT, FleetEnv, fleet_env

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

MODEL = {"provider": "openai", "modelId": "gpt-4o-mini"}
USAGE = {"inputTokens": 1_000_000, "outputTokens": 0}  # $0.15 at gpt-4o-mini's registry rate


def little(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return zygote.run(
        args,
        cwd=ROOT,
        env=None if env is None else dict(env),
        timeout=60,
    )


def write_run(world: World, run_id: str, workflow: str, end: str | None) -> None:
    """A run submitted by workflow id, with one priced model call, ended as ``end`` says."""
    events = [
        EventInput(type="little.run.submitted", payload={"workflowId": workflow, "input": {}}),
        EventInput(type="RunStarted", payload={"workflowVersionId": "wfver_x"}),
        EventInput(
            type="harness.model.responded",
            payload={"stepPath": "think", "model": MODEL, "response": {"usage": USAGE}},
        ),
    ]
    if end == "completed":
        events.append(EventInput(type="RunCompleted", payload={"output": {}}))
    elif end in ("failed", "cancelled"):
        cause = "cancelled" if end == "cancelled" else "tool_error"
        events.append(
            EventInput(type="RunFailed", payload={"error": {"causeCode": cause, "message": "x"}})
        )
    world.append_batch(run_id, events)
    time.sleep(0.01)  # distinct start times: the listing sorts on them


def rows(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert result.returncode == 0, result.stderr
    listed: list[dict[str, Any]] = json.loads(result.stdout)
    return listed


def test_runs_lists_a_local_worlds_runs_newest_first(tmp_path: Path) -> None:
    data = tmp_path / "world"
    lwir = tmp_path / "chain.json"
    lwir.write_text(json.dumps(wf.chain_lwir(2)), encoding="utf-8")
    made = little("run", str(lwir), "--data-dir", str(data), "--app", "tests.workflows_for_tests")
    assert made.returncode == 0, made.stderr
    chain_run = made.stderr.splitlines()[0].split()[1]
    world = LocalWorld(data)
    try:
        write_run(world, "run_triage_1", "support.triage", "failed")
        write_run(world, "run_triage_2", "support.triage", "cancelled")
        write_run(world, "run_triage_3", "support.triage", None)
    finally:
        world.close()

    listed = rows(little("runs", "--data-dir", str(data), "--json"))
    assert [(r["runId"], r["workflow"], r["status"]) for r in listed] == [
        ("run_triage_3", "support.triage", "running"),
        ("run_triage_2", "support.triage", "cancelled"),
        ("run_triage_1", "support.triage", "failed"),
        (chain_run, "tests.chain", "completed"),  # its name, from the version it ran
    ]
    running, cancelled = listed[:2]
    assert running["durationMs"] is None and running["finishedAt"] is None
    assert cancelled["durationMs"] >= 0 and cancelled["finishedAt"] >= cancelled["startedAt"]
    assert [r["costUsd"] for r in listed] == [0.15, 0.15, 0.15, 0]

    def ids(*args: str) -> list[str]:
        return [r["runId"] for r in rows(little("runs", "--data-dir", str(data), "--json", *args))]

    assert ids("--status", "failed") == ["run_triage_1"]
    assert ids("--status", "cancelled") == ["run_triage_2"]
    assert ids("--workflow", "tests.*") == [chain_run]
    assert ids("--workflow", "support.*", "--limit", "2") == ["run_triage_3", "run_triage_2"]

    table = little("runs", "--data-dir", str(data))
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["RUN", "WORKFLOW", "STATUS", "STARTED", "DURATION", "COST", "(USD)"]
    assert lines[1].split()[:3] == ["run_triage_3", "support.triage", "running"]
    assert lines[1].split()[-2:] == ["—", "0.150000"]


def test_runs_of_an_empty_world_says_so_and_bad_options_exit_2(tmp_path: Path) -> None:
    LocalWorld(tmp_path).close()
    empty = little("runs", "--data-dir", str(tmp_path))
    assert (empty.returncode, empty.stdout, empty.stderr) == (0, "", "no runs\n")
    for bad in (["--status", "done"], ["--limit", "-1"]):
        result = little("runs", "--data-dir", str(tmp_path), *bad)
        assert result.returncode == 2
        assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr


@pytest.mark.integration
def test_runs_lists_the_fleet_worlds_runs_live_and_archived(fleet_env: FleetEnv) -> None:
    from little_dist.world.redis_s3 import RedisS3World

    world = fleet_env.world()
    assert isinstance(world, RedisS3World)
    write_run(world, "run_fleet_1", "support.triage", "completed")
    write_run(world, "run_fleet_2", "candidate.screening", "failed")
    write_run(world, "run_fleet_3", "support.triage", None)
    # Archived, and its Redis keys gone: read from S3.
    world.archive_run("run_fleet_1", ttl_seconds=0)
    assert world.list_events("run_fleet_1")[-1].type == "RunCompleted"

    listed = rows(little("runs", "--json", env=fleet_env.env))
    assert [(r["runId"], r["workflow"], r["status"], r["costUsd"]) for r in listed] == [
        ("run_fleet_3", "support.triage", "running", 0.15),
        ("run_fleet_2", "candidate.screening", "failed", 0.15),
        ("run_fleet_1", "support.triage", "completed", 0.15),
    ]
    assert [
        r["runId"]
        for r in rows(little("runs", "--json", "--status", "completed", env=fleet_env.env))
    ] == ["run_fleet_1"]


@pytest.mark.integration
def test_runs_names_the_workflow_of_a_version_stored_as_shared_part_and_binding(
    fleet_env: FleetEnv,
) -> None:
    from little_dist.fleet.app_registry import load_registry
    from little_dist.fleet.client import Client
    from little_dist.fleet.queue import MemoryQueue
    from little_dist.settings import load_settings
    from tests import fleet_app

    world = fleet_env.world()
    client = Client(
        load_settings({}),
        world=world,
        queue=MemoryQueue(),
        registry=load_registry("tests.fleet_app"),
    )
    assert fleet_app.chain5.plan is not None
    run_id = client.submit(dict(fleet_app.chain5.plan), {}, run_id="run_parts_named")
    first = world.list_events(run_id)[0]
    assert "binding" in first.payload  # stored as a shared part plus the run's binding
    listed = rows(little("runs", "--json", env=fleet_env.env))
    assert [(r["runId"], r["workflow"]) for r in listed if r["runId"] == run_id] == [
        (run_id, fleet_app.chain5.id)
    ]
