"""docs/operations.md, run as written: the local fleet recipe, and a run started from another
service that imports only ``celery`` and ``redis``.

* The recipe ("A fleet on one machine, without Docker") is every ``<!-- checked -->`` bash
  block of its section, run by bash from the repository root with the venv's ``bin`` on
  ``PATH`` and no ``LITTLE_*``/``AWS_*`` variables of ours: it starts Redis, ``weed mini``,
  a worker, the scheduler and Flower itself, runs an example, and stops them.
* The sender is a subprocess that sends ``little.submit_run`` by name, as the section "Start
  runs from another service" shows (the same run id twice, then with another input), and
  watches the run's Redis stream by the documented key names and fields; it checks that it
  never imported ``little_dist``. Real worker and scheduler processes serve it.
* That section's examples (a sender with Celery's Python client, one with ``celery-node``)
  are its ``<!-- checked -->`` blocks, run as written, each on the throwaway fleet it starts
  (``examples/local_fleet.sh``); the Node one installs ``celery-node`` with npm.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from little_dist.world.redis_s3.keys import KeyLayout
from scripts.fresh_clone import checked_blocks
from tests import workflows_for_tests as wf
from tests.fleet_processes import ROOT, FleetEnv, fleet_env, start_scheduler, start_worker

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

OPERATIONS = ROOT / "docs" / "operations.md"
RECIPE_SECTION = "## A fleet on one machine, without Docker"
SERVICE_SECTION = "## Start runs from another service"


def test_the_recipe_has_checked_blocks() -> None:
    blocks = checked_blocks(OPERATIONS.read_text(encoding="utf-8"), RECIPE_SECTION)
    assert blocks and all("little" in block for block in blocks)


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_the_local_fleet_recipe_runs_as_written(tmp_path: Path) -> None:
    script = "\n".join(checked_blocks(OPERATIONS.read_text(encoding="utf-8"), RECIPE_SECTION))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LITTLE_", "AWS_", "FLOWER_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["TMPDIR"] = str(tmp_path)  # mktemp -d: whatever the recipe leaves is found here
    log = tmp_path / "recipe.log"
    with log.open("wb") as out:
        # Its own session: whatever it started is killed with it if the test fails.
        process = subprocess.Popen(
            # -e: a command that fails fails the recipe (a person sees it stop).
            ["bash", "-e", "-c", script],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = process.wait(timeout=360)
            # Nothing it started outlives it (checked before the kill below cleans up).
            time.sleep(1)
            leftover = subprocess.run(
                ["pgrep", "-a", "-s", str(process.pid)], capture_output=True, text=True
            ).stdout
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    output = log.read_text(encoding="utf-8", errors="replace")
    assert code == 0, output[-6000:]
    assert "status    completed" in output, output[-6000:]
    assert re.search(r"Flower: http://127\.0\.0\.1:\d+ \(login: admin:[0-9a-f]{24}\)", output)
    assert re.search(r"^run_local_fleet_\d+ +support\.triage +completed", output, re.M), output
    assert list(tmp_path.iterdir()) == [log]  # it cleaned up after itself
    assert leftover == ""


# -- another service ----------------------------------------------------------------------

SENDER = textwrap.dedent(
    """
    import json, os, sys, time

    import redis
    from celery import Celery

    broker, prefix, queue = os.environ["BROKER"], os.environ["PREFIX"], os.environ["QUEUE"]
    run_id, lwir = os.environ["RUN_ID"], json.loads(os.environ["LWIR"])
    app = Celery(broker=broker)

    def submit(run_input):
        app.send_task(
            "little.submit_run",
            kwargs={"lwir": lwir, "input": run_input, "run_id": run_id},
            queue=queue,
        )

    r = redis.Redis.from_url(broker)
    stream, ended = prefix + "{" + run_id + "}:events", prefix + "{" + run_id + "}:ended"
    submit({"ticket": "T-1"})
    # The same run id again: with the same input, then with another one (refused).
    deadline = time.monotonic() + 60
    while not r.exists(stream):
        assert time.monotonic() < deadline, "the run never appeared"
        time.sleep(0.1)
    submit({"ticket": "T-1"})
    submit({"ticket": "T-2"})
    # Woken by the run's end, announced on the stream of every run's end; its marker says.
    while not r.exists(ended):
        r.xread({prefix + "ended": "$"}, block=1000)
    types, end = [], None
    for entry_id, fields in r.xrange(stream):
        kind = fields[b"t"].decode()
        types.append(kind)
        if kind == "RunStarted":
            started = json.loads(fields[b"p"])
        if kind in ("RunCompleted", "RunFailed"):
            end = {"type": kind, "payload": json.loads(fields[b"p"])}
    print(json.dumps({"types": types, "started": started, "end": end}))
    assert not any(name.split(".")[0] == "little_dist" for name in sys.modules), "imported"
    """
)


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_another_service_starts_and_watches_a_run_with_celery_and_redis_only(
    fleet_env: FleetEnv,
) -> None:
    worker = start_worker(fleet_env, roles=["planner", "worker"])
    start_scheduler(fleet_env)
    prefix = fleet_env.key_prefix
    run_id = "run_ticket_T1"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "BROKER": fleet_env.env["LITTLE_BROKER_URL"],
        "PREFIX": prefix,
        "QUEUE": fleet_env.env["LITTLE_QUEUE_PLANNER"],
        "RUN_ID": run_id,
        "LWIR": json.dumps(wf.chain_lwir(3)),
    }
    sender = subprocess.run(
        [sys.executable, "-c", SENDER],
        env=env,
        cwd="/",  # not the repository: nothing of ours on sys.path
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sender.returncode == 0, sender.stderr
    seen = json.loads(sender.stdout)
    assert seen["end"] == {"type": "RunCompleted", "payload": seen["end"]["payload"]}
    assert seen["end"]["payload"]["output"] == {"n": 2}
    assert seen["types"].count("RunStarted") == 1
    assert seen["started"]["input"] == {"ticket": "T-1"}
    # The third send, another input under the same id, was refused: the worker says so and
    # the run kept its first input.
    worker.wait_for_output(rf"{run_id} was submitted with a different input", timeout=30)
    with fleet_env.client() as client:
        assert client.status(run_id).status == "completed"
        started = [e for e in client.events(run_id) if e.type == "RunStarted"]
    assert [e.payload["input"] for e in started] == [{"ticket": "T-1"}]


def _run_as_written(script: str, tmp_path: Path, timeout: float) -> tuple[int, str, str]:
    """``script`` under ``bash -e`` from the repository root, as a reader runs it: the venv's
    ``bin`` on ``PATH``, no ``LITTLE_*``/``AWS_*``/``FLOWER_*`` variables of ours, its own
    session; ``(exit code, output, processes it left behind)``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LITTLE_", "AWS_", "FLOWER_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["TMPDIR"] = str(tmp_path)  # mktemp -d: whatever the script leaves is found here
    log = tmp_path / "script.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["bash", "-e", "-c", script],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = process.wait(timeout=timeout)
            time.sleep(1)
            leftover = subprocess.run(
                ["pgrep", "-a", "-s", str(process.pid)], capture_output=True, text=True
            ).stdout
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    return code, log.read_text(encoding="utf-8", errors="replace"), leftover


def test_the_service_section_has_a_checked_python_and_node_example() -> None:
    blocks = checked_blocks(OPERATIONS.read_text(encoding="utf-8"), SERVICE_SECTION)
    assert len(blocks) == 2
    python, node = blocks
    assert "python3 - <<'PY'" in python and "node - <<'JS'" in node
    for block in blocks:
        assert block.startswith(". examples/local_fleet.sh")
        assert "little_dist" not in block.split("\n", 1)[1]


@pytest.mark.integration
@pytest.mark.timeout(420)
@pytest.mark.parametrize(
    ("index", "lines"),
    [
        (
            0,
            [
                "completed run_ticket_T1001 billing",
                "refused invalid_input workflow 'support.triage': invalid input: input: "
                "'subject' is a required property",
            ],
        ),
        (
            1,
            [
                "completed run_ticket_T1002 billing",
                "refused invalid_arguments little.submit_run takes no argument 'workflow' "
                "(it takes workflow_id, lwir, input, run_id, budget_usd, deadline, timeout, "
                "max_attempts, callback_url)",
            ],
        ),
    ],
    ids=["python", "node"],
)
def test_the_service_examples_run_as_written(tmp_path: Path, index: int, lines: list[str]) -> None:
    """The section's checked blocks, each on the throwaway fleet it starts: a sender with
    only Celery's client (Python's, then celery-node, installed by npm from its registry)
    sees its run complete, and a refusal with its cause."""
    script = checked_blocks(OPERATIONS.read_text(encoding="utf-8"), SERVICE_SECTION)[index]
    code, output, leftover = _run_as_written(script, tmp_path, timeout=360)
    assert code == 0, output[-6000:]
    for line in lines:
        assert line in output, output[-6000:]
    assert list(tmp_path.iterdir()) == [tmp_path / "script.log"]  # it cleaned up after itself
    assert leftover == ""


def test_the_documented_redis_keys_are_the_worlds() -> None:
    """The key names "Start runs from another service" documents as a contract."""
    layout = KeyLayout()
    keys = layout.run("run_ticket_T1001")
    assert keys.events == "little:{run_ticket_T1001}:events"
    assert keys.ended == "little:{run_ticket_T1001}:ended"
    assert keys.archived == "little:{run_ticket_T1001}:archived"
    assert keys.outcome == "little:{run_ticket_T1001}:outcome"
    assert layout.task("0b5c") == "little:task:0b5c"
    assert layout.ends == "little:ended"
    text = OPERATIONS.read_text(encoding="utf-8")
    for name in ("events", "ended", "archived", "outcome"):
        assert f"`little:{{RUN_ID}}:{name}`" in text
    assert "`little:task:{TASK_ID}`" in text
    assert 'queue="little.planner"' in text
