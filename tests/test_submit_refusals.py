"""A service that sends ``little.submit_run`` by name learns what became of it (issue 37).

The sender is a subprocess that imports only ``celery`` and ``redis`` (what ``celery[redis]``
installs), never ``little_dist``, and talks to a real ``little worker`` through real Redis:
it sends each submission by name and waits for its answer the way docs/operations.md
("Start runs from another service") tells: the task's (``task:<task id>``: accepted, or
refused and why), then the run's (``{run}:outcome``), woken by the stream of ends. Every
refusal comes back with its cause and reason; a refused submission with a usable run id is
recorded under it too, never over a run that exists. The task itself ends FAILURE with an
expected error (one log line, no traceback), as a Celery event monitor (Flower) sees it. A
watcher started after the run's log left Redis (its archive) still sees its end and output.

How long each answer took is printed (``-s``): on a quiet machine a refusal is back within
a second; nothing here asserts a time (the machine running the tests may be loaded).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tests.conftest_services import S3Service
from tests.fleet_processes import (
    FleetEnv,
    FleetProcess,
    fleet_env,
    make_fleet_env,
    start_scheduler,
    start_worker,
)
from tests.test_cli_fleet import triage_doc

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

TRIAGE_APP = "examples.support_triage"
TICKET = {"account_id": "acme-42", "subject": "Export", "message": "It times out."}

#: The sender: submissions from SUBMISSIONS (a JSON list of {kwargs, args?, task_id?}),
#: sent one after the other; for each, what came back and how long it took.
SENDER = textwrap.dedent(
    """
    import json, os, sys, threading, time, uuid

    import redis
    from celery import Celery

    broker, prefix, queue = os.environ["BROKER"], os.environ["PREFIX"], os.environ["QUEUE"]
    app = Celery(broker=broker)
    r = redis.Redis.from_url(broker)

    def wait_for(key, deadline):
        # The record under key, woken by the stream of ends (a second at most between looks).
        while time.monotonic() < deadline:
            found = r.get(key)
            if found:
                return json.loads(found)
            r.xread({prefix + "ended": "$"}, block=1000)
        return None

    def answer(task_id, run_id, timeout):
        # The task's answer; once accepted, the run's outcome.
        deadline = time.monotonic() + timeout
        found = wait_for(prefix + "task:" + task_id, deadline)
        if found is None or found["status"] == "refused":
            return found
        return wait_for(prefix + "{" + found["runId"] + "}:outcome", deadline)

    events = []
    if os.environ.get("EVENTS"):
        # What Flower sees: the workers' task events on the broker.
        def monitor():
            with app.connection() as connection:
                receiver = app.events.Receiver(
                    connection,
                    handlers={"*": lambda event: events.append(event)},
                )
                receiver.capture(limit=None, timeout=None, wakeup=True)
        threading.Thread(target=monitor, daemon=True).start()
        time.sleep(2)  # (subscribed before anything is sent)

    results = []
    for item in json.loads(os.environ["SUBMISSIONS"]):
        task_id = item.get("task_id") or str(uuid.uuid4())
        run_id = item["kwargs"].get("run_id", "run_" + task_id)
        if not isinstance(run_id, str):
            run_id = None
        sent = time.monotonic()
        app.send_task(
            "little.submit_run",
            args=item.get("args", []),
            kwargs=item["kwargs"],
            queue=queue,
            task_id=task_id,
        )
        found = answer(task_id, run_id, float(item.get("timeout", 60)))
        results.append(
            {
                "taskId": task_id,
                "runId": run_id,
                "answer": found,
                "seconds": round(time.monotonic() - sent, 3),
                "task": json.loads(r.get(prefix + "task:" + task_id) or "null"),
            }
        )
    if os.environ.get("EVENTS"):
        deadline = time.monotonic() + 30
        ids = {result["taskId"] for result in results}
        while time.monotonic() < deadline:
            ended = {e.get("uuid") for e in events if e["type"].startswith("task-") and
                     e["type"] in ("task-failed", "task-succeeded")}
            if ids <= ended:
                break
            time.sleep(0.2)
    print(json.dumps({"results": results, "events": [
        {k: e.get(k) for k in ("type", "uuid", "exception", "traceback")} for e in events
        if e["type"] in ("task-failed", "task-succeeded", "task-retried")
    ]}))
    assert not any(name.split(".")[0] == "little_dist" for name in sys.modules), "imported"
    """
)


def send(fleet: FleetEnv, submissions: list[dict[str, Any]], *, events: bool = False) -> Any:
    """Run the sender (only celery and redis) on ``submissions``; what it saw."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "BROKER": fleet.env["LITTLE_BROKER_URL"],
        "PREFIX": fleet.key_prefix,
        "QUEUE": fleet.env["LITTLE_QUEUE_PLANNER"],
        "SUBMISSIONS": json.dumps(submissions),
    }
    if events:
        env["EVENTS"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", SENDER],
        env=env,
        cwd="/",  # not the repository: nothing of ours on sys.path
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


def _refusal(result: dict[str, Any], cause: str) -> str:
    """The refusal ``result`` came back with (its cause checked); its message."""
    found = result["answer"]
    assert found is not None, result
    assert found["status"] == "refused", found
    assert found["taskId"] == result["taskId"]
    error = found["payload"]["error"]
    assert error["name"] == "SubmissionRefused"
    assert error["causeCode"] == cause, error
    assert result["task"] == found, result  # the task's answer, always
    message: str = error["message"]
    return message


def _latencies(results: list[dict[str, Any]]) -> None:
    seconds = sorted(result["seconds"] for result in results)
    print(
        f"\nrefusal latency (send -> answer seen): {len(seconds)} refusals, "
        f"median {seconds[len(seconds) // 2]:.3f}s, max {seconds[-1]:.3f}s"
    )


def _start(fleet: FleetEnv, **env: str) -> FleetProcess:
    return start_worker(
        fleet, roles=["planner", "worker"], app=TRIAGE_APP, env=env or None, concurrency=2
    )


@pytest.fixture(scope="module")
def refusing(
    redis_url: str, s3_service: S3Service, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[FleetEnv, FleetProcess]]:
    """One planner worker for every refusal below (inputs over 2,000 bytes are refused)."""
    fleet = make_fleet_env(redis_url, s3_service, tmp_path_factory.mktemp("refusing"))
    try:
        yield fleet, _start(fleet, LITTLE_MAX_INPUT_BYTES="2000")
    finally:
        fleet.close()


#: ``(what, the submission, causeCode, words of its message, recorded under its run id)``.
REFUSALS: list[tuple[str, dict[str, Any], str, str, bool]] = [
    (
        "a missing input field",
        {"kwargs": {"workflow_id": "support.triage", "input": {"account_id": "a"}}},
        "invalid_input",
        "'subject' is a required property",
        True,
    ),
    (
        "an input field of the wrong type",
        {"kwargs": {"workflow_id": "support.triage", "input": {**TICKET, "account_id": 7}}},
        "invalid_input",
        "input.account_id: 7 is not of type 'string'",
        True,
    ),
    (
        "an input over LITTLE_MAX_INPUT_BYTES",
        {"kwargs": {"workflow_id": "support.triage", "input": {**TICKET, "message": "x" * 3000}}},
        "over_limit",
        "more than LITTLE_MAX_INPUT_BYTES=2,000",
        True,
    ),
    (
        "an invalid LWIR document",
        {"kwargs": {"lwir": {"apiVersion": "nope"}, "input": {}}},
        "invalid_workflow",
        "apiVersion must be littleworkflow.dev/v0.1",
        True,
    ),
    (
        "a document naming a tool its workflow does not register",
        {"kwargs": {"lwir": triage_doc("deleteAll"), "input": {}}},
        "capability_not_registered",
        "calls tool 'deleteAll', which workflow 'support.triage' does not register",
        True,
    ),
    (
        "a workflow id the workers' app does not define",
        {"kwargs": {"workflow_id": "support.triage2", "input": TICKET}},
        "unknown_workflow",
        "workflow 'support.triage2' is not one of the workers' app (registered: support.triage)",
        True,
    ),
    (
        "a misspelled argument",
        {"kwargs": {"workflow": "support.triage", "input": TICKET}},
        "invalid_arguments",
        "little.submit_run takes no argument 'workflow' (it takes workflow_id, lwir, input, "
        "run_id, budget_usd, deadline, timeout, max_attempts, callback_url)",
        True,
    ),
    (
        "neither workflow_id nor lwir",
        {"kwargs": {"input": TICKET}},
        "invalid_arguments",
        "takes exactly one of workflow_id (a workflow of the workers' app) and lwir",
        True,
    ),
    (
        "both workflow_id and lwir",
        {
            "kwargs": {
                "workflow_id": "support.triage",
                "lwir": triage_doc("lookup_customer"),
                "input": {},
            }
        },
        "invalid_arguments",
        "got both",
        True,
    ),
    (
        "ten positional arguments",
        {
            "args": [
                *("support.triage", None, TICKET, "RUN_ID", None, None, None, None, None),
                "extra",
            ],
            "kwargs": {},
        },
        "invalid_arguments",
        "takes at most 9 positional arguments (workflow_id, lwir, input, run_id, budget_usd, "
        "deadline, timeout, max_attempts, callback_url), got 10",
        True,
    ),
    (
        "a run id that is none",
        {"kwargs": {"workflow_id": "support.triage", "input": TICKET, "run_id": "ticket-1001"}},
        "invalid_run_id",
        "Invalid run id: 'ticket-1001' (expected 'run_' followed by 1-80 of A-Z a-z 0-9 _ -)",
        False,
    ),
    (
        "no run id and a task id that makes none",
        {"kwargs": {"workflow_id": "support.triage", "input": TICKET}, "task_id": "a task"},
        "invalid_run_id",
        "no run_id given, and the task id 'a task' makes no run id",
        False,
    ),
]


@pytest.mark.parametrize(
    ("submission", "cause", "words", "under_run"),
    [case[1:] for case in REFUSALS],
    ids=[case[0] for case in REFUSALS],
)
def test_a_refusal_reaches_a_sender_with_celery_only_with_its_cause(
    refusing: tuple[FleetEnv, FleetProcess],
    submission: dict[str, Any],
    cause: str,
    words: str,
    under_run: bool,
) -> None:
    fleet, worker = refusing
    submission = json.loads(json.dumps(submission))
    if under_run:  # a fresh run id for this case, by name or in its place
        run_id = f"run_refused_{uuid.uuid4().hex[:8]}"
        if submission.get("args"):
            submission["args"][3] = run_id
        else:
            submission["kwargs"]["run_id"] = run_id
    (result,) = send(fleet, [submission])["results"]
    _latencies([result])
    assert words in _refusal(result, cause), result
    found = result["answer"]
    check = redis.Redis.from_url(fleet.redis_url)
    try:
        if under_run:
            # Recorded under the run id (nobody's run): a watcher of the run sees it; no
            # run was made (no log).
            assert found["runId"] == run_id
            outcome = check.get(f"{fleet.key_prefix}{{{run_id}}}:outcome")
            assert outcome is not None and json.loads(outcome) == found
            assert check.exists(f"{fleet.key_prefix}{{{run_id}}}:events") == 0
        else:
            # Unusable: by its task id only, nothing under the id it gave (if any).
            given = submission["kwargs"].get("run_id")
            assert found["runId"] is None
            if given is not None:
                assert not list(check.scan_iter(match=f"{fleet.key_prefix}*{given}*"))
    finally:
        check.close()
    # The task: FAILURE with an expected error, in one line of the worker's log (Celery's,
    # for a task that declares it throws it), no traceback.
    line = f"little.submit_run[{result['taskId']}] raised expected: SubmissionRefused("
    worker.wait_for_output(line.replace("[", r"\[").replace("(", r"\("), timeout=30)
    assert "Traceback" not in worker.output()


def test_a_submission_without_a_run_id_runs_under_its_task_id_and_a_taken_id_is_refused(
    fleet_env: FleetEnv,
) -> None:
    _start(fleet_env)
    start_scheduler(fleet_env)
    taken = f"run_taken_{uuid.uuid4().hex[:6]}"
    task = str(uuid.uuid4())
    seen = send(
        fleet_env,
        [
            # No run id: the run is run_<task id>, which the sender knows.
            {"kwargs": {"workflow_id": "support.triage", "input": TICKET}, "task_id": task},
            {"kwargs": {"workflow_id": "support.triage", "input": TICKET, "run_id": taken}},
            # The same id again with the same input: the same run, its outcome the answer.
            {"kwargs": {"workflow_id": "support.triage", "input": TICKET, "run_id": taken}},
            # Another input under the taken id: refused, by task id only.
            {
                "kwargs": {
                    "workflow_id": "support.triage",
                    "input": {**TICKET, "subject": "B"},
                    "run_id": taken,
                }
            },
        ],
        events=True,
    )
    first, run, again, other = seen["results"]
    assert first["runId"] == f"run_{task}"
    assert first["answer"]["status"] == "completed", first
    assert first["answer"]["payload"]["output"]["category"] == "billing"
    assert run["answer"]["status"] == "completed", run["answer"].get("payload")
    assert again["answer"] == run["answer"]
    message = _refusal(other, "run_id_taken")
    assert f"run {taken} was submitted with a different input" in message
    assert other["answer"]["runId"] == taken
    with fleet_env.client() as client:
        assert client.status(taken).status == "completed"
        started = [e for e in client.events(taken) if e.type == "RunStarted"]
        assert [e.payload["input"] for e in started] == [TICKET]
    check = redis.Redis.from_url(fleet_env.redis_url)
    try:
        outcome = json.loads(check.get(f"{fleet_env.key_prefix}{{{taken}}}:outcome") or b"{}")
    finally:
        check.close()
    assert outcome["status"] == "completed"  # the refusal did not touch the run's record
    # What Flower sees: the refused task FAILED with the expected error, the others succeeded.
    events = {e["uuid"]: e for e in seen["events"] if e["type"] != "task-retried"}
    assert not [e for e in seen["events"] if e["type"] == "task-retried"]
    assert events[other["taskId"]]["type"] == "task-failed"
    assert events[other["taskId"]]["exception"].startswith(
        f"SubmissionRefused({taken} refused (run_id_taken): run {taken} was submitted"
    )
    assert {events[r["taskId"]]["type"] for r in (first, run, again)} == {"task-succeeded"}


def test_a_watcher_started_after_the_archive_sees_the_end_and_the_output(
    fleet_env: FleetEnv,
) -> None:
    """The run's log leaves Redis after its archive (here: a second after it); its outcome
    stays, so a watcher started then, or a retry of the finished run, still learns how it
    ended, without S3."""
    quick = {"LITTLE_ARCHIVE_TTL": "1", "LITTLE_ARCHIVE_DELAY": "0"}
    fleet_env.env.update(quick)
    _start(fleet_env)
    start_scheduler(fleet_env)
    run_id = f"run_archived_{uuid.uuid4().hex[:6]}"
    kwargs = {"workflow_id": "support.triage", "input": TICKET, "run_id": run_id}
    first = send(fleet_env, [{"kwargs": kwargs}])["results"][0]
    assert first["answer"]["status"] == "completed"
    events_key = f"{fleet_env.key_prefix}{{{run_id}}}:events"
    archived_key = f"{fleet_env.key_prefix}{{{run_id}}}:archived"
    check = redis.Redis.from_url(fleet_env.redis_url)
    try:
        deadline = time.monotonic() + 120
        while check.exists(events_key, archived_key):
            assert time.monotonic() < deadline, "the run's log never left Redis"
            time.sleep(0.2)
    finally:
        check.close()
    # A watcher started now (the log is only in S3), and a retry of the finished run.
    later = send(fleet_env, [{"kwargs": kwargs}])["results"][0]
    assert later["answer"] == first["answer"]
    assert later["answer"]["payload"]["output"]["severity"] == "high"
    assert later["answer"]["runId"] == run_id and later["answer"]["sequence"] > 3
    watcher = subprocess.run(
        [sys.executable, "-c", WATCHER],
        env={
            "PATH": os.environ.get("PATH", ""),
            "REDIS": fleet_env.redis_url,
            "KEY": f"{fleet_env.key_prefix}{{{run_id}}}:outcome",
        },
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert watcher.returncode == 0, watcher.stderr
    assert json.loads(watcher.stdout)["payload"] == first["answer"]["payload"]
    with fleet_env.client() as client:  # (the retry started nothing: one RunStarted)
        assert [e.type for e in client.events(run_id)].count("RunStarted") == 1


#: A watcher with redis-py alone: the run's outcome key, nothing else.
WATCHER = textwrap.dedent(
    """
    import os, sys
    import redis

    found = redis.Redis.from_url(os.environ["REDIS"]).get(os.environ["KEY"])
    print(found.decode())
    assert "little_dist" not in sys.modules
    """
)
