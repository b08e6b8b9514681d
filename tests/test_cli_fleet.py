"""``little submit|status|cancel`` against real ``little worker`` (and ``little scheduler``)
processes on Redis and ``weed mini``.

Workers run with the network guard on; model steps use the examples' scripted provider
(installed when ``--app examples.support_triage`` is imported in the worker).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from little_dist.world.in_process import MemoryWorld
from tests import workflows_for_tests as wf
from tests import zygote
from tests.fleet_processes import (
    ROOT,
    FleetEnv,
    fleet_env,
    start_scheduler,
    start_worker,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest


def little(
    fleet: FleetEnv, *args: str, timeout: float = 60.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return zygote.run(args, cwd=ROOT, env={**fleet.env, **(env or {})}, timeout=timeout)


def _write(tmp: Path, name: str, value: Any) -> str:
    path = tmp / name
    path.write_text(json.dumps(value), encoding="utf-8")
    return str(path)


def _ok(result: subprocess.CompletedProcess[str], code: int = 0) -> str:
    assert result.returncode == code, (
        f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    return result.stdout


def test_submit_wait_prints_the_output_and_status_shows_the_run(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    start_worker(fleet_env, roles=["worker"])
    lwir = _write(tmp_path, "chain.json", wf.chain_lwir(3))
    out = _ok(little(fleet_env, "submit", lwir, "--input", "{}", "--wait", "--timeout", "40"))
    assert json.loads(out) == {"n": 2}

    run_id = _ok(little(fleet_env, "submit", lwir, "--input", "{}", "--run-id", "run_cli_1"))
    assert run_id.strip() == "run_cli_1"
    with fleet_env.client() as client:
        client.wait("run_cli_1", timeout=40)
    status = json.loads(_ok(little(fleet_env, "status", "run_cli_1", "--json")))
    assert status["status"] == "completed"
    assert status["output"] == {"n": 2}
    assert status["steps"] == {"s0": "completed", "s1": "completed", "s2": "completed"}
    text = _ok(little(fleet_env, "status", "run_cli_1"))
    assert "status    completed" in text and "  completed  s2" in text


def test_an_example_workflow_runs_on_the_fleet_as_in_process(fleet_env: FleetEnv) -> None:
    from examples import support_triage
    from little_dist import run_workflow

    local = run_workflow(support_triage.workflow, support_triage.SAMPLE_INPUT, world=MemoryWorld())
    start_worker(fleet_env, roles=["worker", "fixer"], app="examples.support_triage")
    out = _ok(
        little(
            fleet_env,
            "submit",
            "examples.support_triage:workflow",
            "--input",
            json.dumps(support_triage.SAMPLE_INPUT),
            "--wait",
            "--timeout",
            "50",
        )
    )
    assert json.loads(out) == local.output.model_dump(mode="json", by_alias=True)


def test_one_worker_with_four_example_apps_runs_each_of_them(fleet_env: FleetEnv) -> None:
    # Each example answers its own scripted model: no app's script takes the others' calls.
    # order_totals runs bash and code.run in the sandbox, and its fixer on the fixer queue
    # (a failed step's fixer attempt is the scheduler's to send, as on any fleet).
    # The four are submitted at once: each `little submit` imports its example (and litellm)
    # for seconds of CPU, and one after the other they outlasted the test's time limit on a
    # busy machine (the runs themselves take a second).
    names = ["support_triage", "candidate_screening", "draft_review", "order_totals"]
    start_scheduler(fleet_env)
    start_worker(fleet_env, roles=["worker", "fixer"], app=[f"examples.{n}" for n in names])
    with ThreadPoolExecutor(len(names)) as pool:
        results = {
            name: pool.submit(
                little,
                fleet_env,
                "submit",
                f"examples.{name}:workflow",
                "--input",
                f"examples/inputs/{name}.json",
                "--wait",
                "--timeout",
                "50",
                "--json",
                timeout=100,
            )
            for name in names
        }
        for name, result in results.items():
            assert json.loads(_ok(result.result()))["status"] == "completed", name


def test_the_order_totals_example_runs_on_the_fleet_with_its_fixer(fleet_env: FleetEnv) -> None:
    # Bash on scratch files, code.run and the fixer (on the fixer queue), on a worker process:
    # the scratch file crosses steps through S3, and the scheduler sends the failed program
    # to the fixer.
    start_scheduler(fleet_env)
    start_worker(fleet_env, roles=["worker", "fixer"], app=["examples.order_totals"])
    result = little(
        fleet_env,
        "submit",
        "examples.order_totals:workflow",
        "--input",
        "examples/inputs/order_totals.json",
        "--wait",
        "--timeout",
        "60",
        "--json",
    )
    view = json.loads(_ok(result))
    assert view["status"] == "completed"
    assert view["output"]["totals"] == {"north": 162.75, "south": 80, "west": 300}
    assert view["output"]["checked"].startswith("The file holds 4 orders")
    events = fleet_env.world().list_events(view["runId"])
    types = [e.type for e in events]
    assert "harness.file.created" in types and types.count("StepFailed") == 1
    fixer = [
        e for e in events if e.type == "harness.session.started" and e.payload["role"] == "fixer"
    ]
    assert len(fixer) == 1


def test_a_workflow_id_is_planned_by_a_planner_worker(fleet_env: FleetEnv) -> None:
    from examples import support_triage
    from little_dist import run_workflow

    local = run_workflow(
        support_triage.planned_workflow, support_triage.SAMPLE_INPUT, world=MemoryWorld()
    )
    # One workflow per id in an app: the example's module serves its fixed plan under the
    # id, so the planned definition is named.
    start_worker(fleet_env, app="examples.support_triage:planned_workflow")
    result = little(
        fleet_env,
        "submit",
        "support.triage",
        "--app",
        "examples.support_triage:planned_workflow",
        "--input",
        json.dumps(support_triage.SAMPLE_INPUT),
        "--wait",
        "--timeout",
        "50",
        "--json",
    )
    status = json.loads(_ok(result))
    assert status["status"] == "completed"
    assert status["output"] == local.output.model_dump(mode="json", by_alias=True)
    with fleet_env.client() as client:
        types = [event.type for event in client.events(status["runId"])]
    assert types[0] == "little.run.submitted"
    assert "OrchestrationRequested" in types and "WorkflowValidationSucceeded" in types
    assert types.index("WorkflowVersionRegistered") < types.index("RunStarted")


def test_cancel_stops_a_running_run(fleet_env: FleetEnv) -> None:
    start_worker(fleet_env, roles=["worker"])
    with fleet_env.client() as client:
        run_id = client.submit(
            wf.fan_out_lwir(max_concurrency=1), {"keys": ["a", "b", "c", "d"], "sleep": 1.5}
        )
        deadline = time.monotonic() + 30
        while "StepAttemptStarted" not in {e.type for e in client.events(run_id)}:
            assert time.monotonic() < deadline, "the run never started a step"
            time.sleep(0.1)
        out = _ok(little(fleet_env, "cancel", run_id, "--wait", "--timeout", "30"))
        assert out.strip() == f"run {run_id} cancelled"
        state = client.state(run_id)
        assert state.status == "failed"
        assert state.error["causeCode"] == "cancelled"
    again = little(fleet_env, "cancel", run_id)
    _ok(again, 1)
    assert "already ended (cancelled)" in again.stderr
    status = json.loads(_ok(little(fleet_env, "status", run_id, "--json"), 1))
    assert status["error"]["causeCode"] == "cancelled"
    assert status["cancelRequested"] is True


def test_the_scheduler_drives_runs_when_workers_do_not(fleet_env: FleetEnv) -> None:
    # Workers without the fast path leave every next step to `little scheduler`.
    start_worker(fleet_env, roles=["worker"], extra_args=["--no-fast-path"])
    start_scheduler(fleet_env)
    with fleet_env.client() as client:
        run_id = client.submit(wf.chain_lwir(3), {})
        state = client.wait(run_id, timeout=45)
    assert state.status == "completed"
    assert state.output == {"n": 2}


def test_a_failing_run_exits_1_with_its_cause(fleet_env: FleetEnv, tmp_path: Path) -> None:
    start_worker(fleet_env, roles=["worker"])
    lwir = _write(tmp_path, "explode.json", wf.single_tool_lwir("explode", {"message": "kaput"}))
    result = little(fleet_env, "submit", lwir, "--wait", "--timeout", "40", "--run-id", "run_kaput")
    _ok(result, 1)
    assert "failed" in result.stderr and "kaput" in result.stderr
    # `little status` says why, and exits 1 like the run.
    text = _ok(little(fleet_env, "status", "run_kaput"), 1)
    assert "error     tool_error: tool 'explode' failed: kaput\nin step   only\n" in text
    status = json.loads(_ok(little(fleet_env, "status", "run_kaput", "--json"), 1))
    assert status["failure"] == {
        "causeCode": "tool_error",
        "message": "tool 'explode' failed: kaput",
        "stepPath": "only",
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["submit", "missing-file.json"], "cannot read missing-file.json"),
        (["submit", "tests.workflows_for_tests:nope"], "has no attribute 'nope'"),
        (["submit", "no_such_module_x:wf"], "cannot import module 'no_such_module_x'"),
        (["submit", "wf-id", "--input", "{not json"], "--input: invalid JSON"),
        (["worker", "--roles", "cook"], "expected a comma-separated list of roles"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    fleet_env: FleetEnv, args: Sequence[str], message: str
) -> None:
    result = little(fleet_env, *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_status_of_an_unknown_run_exits_1(fleet_env: FleetEnv) -> None:
    result = little(fleet_env, "status", "run_nobody_knows")
    assert result.returncode == 1
    assert result.stderr.strip() == "little status: Run not found: run_nobody_knows"


def test_the_health_check_pings_the_worker_by_its_default_node_name(fleet_env: FleetEnv) -> None:
    # What compose.yaml and deploy/ run: `celery inspect ping --destination=celery@$HOSTNAME`.
    import sys

    host = f"host-{fleet_env.key_prefix.split(':')[1]}"
    worker = fleet_env.start(
        "default-node",
        ["worker", "--roles", "worker", "--app", "tests.workflows_for_tests"],
        env={"HOSTNAME": host},
    )
    worker.wait_for_output(rf"celery@{host} ready\.", timeout=40)
    ping = subprocess.run(
        [
            sys.executable,
            "-m",
            "celery",
            f"--broker={fleet_env.env['LITTLE_BROKER_URL']}",
            "inspect",
            "ping",
            f"--destination=celery@{host}",
            "--timeout=10",
        ],
        cwd=ROOT,
        env={**fleet_env.env, "HOSTNAME": host},
        capture_output=True,
        text=True,
        timeout=40,
    )
    assert ping.returncode == 0, ping.stdout + ping.stderr
    assert f"celery@{host}: OK" in ping.stdout


# -- what a submission may name, and how much ------------------------------------------------------

TRIAGE_APP = "examples.support_triage"
TRIAGE_TOOLS = "lookup_customer, search_knowledge_base"


def triage_doc(tool_name: str) -> dict[str, Any]:
    """A document for the examples' ``support.triage`` whose one step calls ``tool_name``."""
    return {
        "apiVersion": wf.API_VERSION,
        "kind": "Workflow",
        "metadata": {"name": "support.triage"},
        "input": {"schema": {"type": "object"}},
        "output": {"schema": {"type": "object"}},
        "permissions": {"models": [], "tools": [tool_name]},
        "steps": [
            {
                "id": "lookup",
                "uses": "tool.call",
                "with": {"tool": tool_name, "args": {"account_id": "acme-42"}},
                "output": {"mode": "object", "schema": {"type": "object"}},
            }
        ],
    }


def _no_events(fleet: FleetEnv, *run_ids: str) -> None:
    with fleet.client() as client:
        for run_id in run_ids:
            assert list(client.events(run_id)) == [], run_id


@pytest.mark.parametrize("how", ["--app", "LITTLE_APP"])
def test_submit_refuses_a_tool_the_workflow_does_not_register_in_one_line(
    fleet_env: FleetEnv, tmp_path: Path, how: str
) -> None:
    doc = _write(tmp_path, "widen.json", triage_doc("deleteAll"))
    args = ["submit", doc, "--run-id", "run_widen"]
    if how == "--app":
        result = little(fleet_env, *args, "--app", TRIAGE_APP)
    else:
        result = little(fleet_env, *args, env={"LITTLE_APP": TRIAGE_APP})
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    assert result.stderr == (
        "little submit: step 'lookup' calls tool 'deleteAll', which workflow 'support.triage' "
        f"does not register (registered: {TRIAGE_TOOLS})\n"
    )
    _no_events(fleet_env, "run_widen")


@pytest.mark.parametrize(
    ("content", "env", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, {}, "is nested more than 64 levels deep"),
        # parses (the parser's own limit is near 1,000), then is refused for its depth
        ("[" * 900 + "]" * 900, {}, "is nested more than 64 levels deep"),
        ('{"text": "0123456789"}', {"LITTLE_MAX_INPUT_BYTES": "10"}, "bytes of JSON, more than"),
    ],
    ids=["100k-deep", "900-deep", "too-big"],
)
def test_submit_refuses_an_input_over_a_limit_in_one_line(
    fleet_env: FleetEnv, tmp_path: Path, content: str, env: dict[str, str], message: str
) -> None:
    lwir = _write(tmp_path, "chain.json", wf.chain_lwir(1))
    path = tmp_path / "input.json"
    path.write_text(content, encoding="utf-8")
    result = little(
        fleet_env, "submit", lwir, "--input", str(path), "--run-id", "run_limit", env=env
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("little submit: ") and result.stderr.count("\n") == 1
    assert message in result.stderr
    _no_events(fleet_env, "run_limit")


def test_the_submit_task_sent_by_name_refuses_what_the_client_would(fleet_env: FleetEnv) -> None:
    from little_dist.fleet.sending import TASK_SUBMIT_RUN

    worker = start_worker(fleet_env, roles=["planner"], app=TRIAGE_APP, concurrency=1)
    deep: Any = 1
    for _ in range(100):  # (the broker's JSON encoder refuses far deeper values itself)
        deep = [deep]
    bad = {
        "run_task_widen": {"lwir": triage_doc("deleteAll"), "input": {}},
        "run_task_deep": {"lwir": triage_doc("lookup_customer"), "input": {"x": deep}},
    }
    with fleet_env.client() as client:
        for run_id, kwargs in bad.items():
            client.app.send_task(
                TASK_SUBMIT_RUN,
                kwargs={**kwargs, "run_id": run_id},
                queue=fleet_env.queues["planner"],
            )
        # One planner slot takes the queue in order: once this one is recorded, the others
        # were handled.
        client.app.send_task(
            TASK_SUBMIT_RUN,
            kwargs={"lwir": triage_doc("lookup_customer"), "input": {}, "run_id": "run_task_ok"},
            queue=fleet_env.queues["planner"],
        )
        deadline = time.monotonic() + 40
        while "RunStarted" not in {e.type for e in client.events("run_task_ok")}:
            assert time.monotonic() < deadline, worker.output()[-3000:]
            time.sleep(0.1)
    _no_events(fleet_env, *bad)
    log = worker.output()
    assert (
        "raised expected: SubmissionRefused(run_task_widen refused (capability_not_registered): "
        "step 'lookup' calls tool 'deleteAll', which workflow 'support.triage' does not "
        f"register (registered: {TRIAGE_TOOLS}))"
    ) in log
    assert (
        "raised expected: SubmissionRefused(run_task_deep refused (over_limit): the run input "
        "is nested more than 64 levels deep (LITTLE_MAX_JSON_DEPTH=64))"
    ) in log
    assert "Traceback" not in log
