"""An outer loop on the fleet: a driver process (``run_outer_loop(client=...)``) submits each
cycle's run to a real scheduler and ``little worker`` processes (Redis, S3), which plan it
(the planner role) and run its steps; the driver waits and asks the supervisor. The driver
is SIGKILLed right after the supervisor's decision for cycle 1 was recorded and before the
manifest said so; started again, it finishes the loop without asking the supervisor about
cycle 1 again, and without planning or running cycle 1 again. The scripted model's call
log, shared by every process, counts the planner's and the supervisor's calls; the
``process`` tool's result names the process that ran it. App:
:mod:`tests.outer_loop_fleet_app`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from little_dist.outer_loop import manifest_store_for
from little_dist.outer_loop.report import outer_loop_report
from little_dist.planner.request import PRIOR_CYCLE_NOTE_SEPARATOR
from little_dist.testing import ScriptedModel, Usage, read_call_log
from tests.fleet_processes import ROOT, FleetEnv, fleet_env, start_scheduler, start_worker
from tests.outer_loop_helpers import simple_lwir

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

APP = "tests.outer_loop_fleet_app"
LOOP = "ol_fleet_two_cycles"
#: How long a driver or the scheduler gets to do what the test waits for (a bound on a hang,
#: not a measured time).
PATIENCE = 90.0


def script(tmp_path: Path) -> tuple[Path, Path]:
    calls = tmp_path / "calls.jsonl"
    model = ScriptedModel(call_log=calls)
    model.on(step="planner").reply_json(simple_lwir(), times=None)
    # Each process has its own copy of the replies: route by what the supervisor is shown.
    model.on(step="supervisor", contains='"cycleNumber":2').reply_json(
        {"kind": "done", "finalOutput": {"result": "finished in cycle 2"}},
        usage=Usage(input=3000, output=500),
        times=None,
    )
    model.on(step="supervisor").reply_json(
        {"kind": "continue", "promptNote": "plan it again"},
        usage=Usage(input=1000, output=200),
        times=None,
    )
    return model.save(tmp_path / "script.json"), calls


def start_fleet(fleet: FleetEnv, script_file: Path) -> Any:
    fleet.env["LITTLE_SCRIPTED_MODEL"] = str(script_file)  # the planner workers'
    fleet.env["LITTLE_APP"] = APP
    start_scheduler(fleet)
    return start_worker(fleet, app=APP, concurrency=2, timeout=120)


def drive(fleet: FleetEnv, script_file: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", APP, str(script_file), LOOP, *flags],
        cwd=ROOT,
        env=fleet.env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def calls_of(calls: Path, step: str) -> list[dict[str, Any]]:
    return [
        record
        for record in read_call_log(calls)
        if record.get("metadata", {}).get("little", {}).get("stepPath") == step
    ]


def test_cycles_run_on_the_workers_and_a_killed_driver_resumes_without_asking_again(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    script_file, calls = script(tmp_path)
    worker = start_fleet(fleet_env, script_file)

    killed = drive(fleet_env, script_file, "--die")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(calls_of(calls, "supervisor")) == 1
    world = fleet_env.world()
    store = manifest_store_for(world)
    stored = store.read(LOOP)
    assert stored is not None
    cycle1 = stored.manifest.pending_cycle_run_id
    assert cycle1 is not None and stored.manifest.cycles == ()  # the manifest never knew
    decided = [e for e in world.list_events(cycle1) if e.type == "OuterLoopCycleCompleted"]
    assert [e.payload["supervise"] for e in decided] == [
        {"kind": "continue", "promptNote": "plan it again"}
    ]

    resumed = drive(fleet_env, script_file)
    assert resumed.returncode == 0, resumed.stderr
    shown = json.loads(resumed.stdout)
    assert shown["output"] == {"result": "finished in cycle 2"}

    # The supervisor was asked once per cycle; cycle 1 was not planned or run again.
    supervisor = calls_of(calls, "supervisor")
    planner = calls_of(calls, "planner")
    assert len(supervisor) == 2
    assert '"cycleNumber":2' in supervisor[1]["messages"][-1]["content"]
    assert len(planner) == 2
    # Each planner (on a worker) was shown its cycle, as in process.
    for number, call in enumerate(planner, start=1):
        assert f"this is cycle {number} of at most 3" in call["messages"][0]["content"]
    assert PRIOR_CYCLE_NOTE_SEPARATOR + "plan it again" in planner[1]["messages"][0]["content"]
    final = store.read(LOOP)
    assert final is not None and final.manifest.done
    assert final.manifest.pending_cycle_run_id is None
    runs = [cycle.run_id for cycle in final.manifest.cycles]
    assert runs[0] == cycle1 and len(runs) == 2
    for number, run_id in enumerate(runs, start=1):
        events = world.list_events(run_id)
        (started,) = [e for e in events if e.type == "RunStarted"]
        assert started.payload["outerLoopId"] == LOOP
        (decision,) = [e for e in events if e.type == "OuterLoopCycleCompleted"]
        assert decision.payload["cycleNumber"] == number
        assert len([e for e in events if e.type == "StepAttemptStarted"]) == 1
        # The cycle's step ran in the worker process, not in either driver.
        (completed,) = [e for e in events if e.type == "RunCompleted"]
        ran_in = completed.payload["output"]["result"].rsplit("@", 1)[1]
        assert ran_in == str(worker.pid)
        assert ran_in != str(shown["pid"])

    # The loop's report: the supervisor's two calls priced (gpt-4o-mini rates), exact sums.
    report = outer_loop_report(world, LOOP)
    assert [c.decision for c in report.cycles] == ["continue", "done"]
    assert (report.supervisor.input_tokens, report.supervisor.output_tokens) == (4000, 700)
    assert report.supervisor.cost_usd == pytest.approx(0.00102, abs=1e-12)
    assert report.supervisor.priced_calls == 2
    assert report.total.input_tokens == report.runs.input_tokens + 4000


def test_a_cycle_run_that_ended_while_no_driver_ran_still_takes_its_decision(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    """The scheduler finishes a cycle's run as it finishes any run; it must not archive it
    (an archived log refuses the decision the loop appends after the run's end)."""
    from little_dist.fleet.sweeper import ActiveRuns
    from little_dist.fleet.worker_slots import fleet_redis
    from little_dist.world.fleet_keys import active_runs_key

    script_file, calls = script(tmp_path)
    start_fleet(fleet_env, script_file)

    killed = drive(fleet_env, script_file, "--die-before-decision")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    world = fleet_env.world()
    store = manifest_store_for(world)
    stored = store.read(LOOP)
    assert stored is not None and stored.manifest.pending_cycle_run_id is not None
    cycle1 = stored.manifest.pending_cycle_run_id
    assert world.list_events(cycle1)[-1].type == "RunCompleted"
    # Wait until the scheduler is done with the run (it leaves the active set once the
    # scheduler has archived it, or decided not to).
    redis_client = fleet_redis(fleet_env.settings())
    try:
        active = ActiveRuns(redis_client, active_runs_key(fleet_env.settings().signal_stream))
        deadline = time.monotonic() + PATIENCE
        while cycle1 in active.members() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cycle1 not in active.members()
    finally:
        redis_client.close()
    assert calls_of(calls, "supervisor") == []

    resumed = drive(fleet_env, script_file)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["output"] == {"result": "finished in cycle 2"}
    assert len(calls_of(calls, "supervisor")) == 2
    assert len(calls_of(calls, "planner")) == 2
    decided = [e for e in world.list_events(cycle1) if e.type == "OuterLoopCycleCompleted"]
    assert [e.payload["supervise"]["kind"] for e in decided] == ["continue"]
    final = store.read(LOOP)
    assert final is not None and final.manifest.done
    # The loop archived its cycle runs itself, once their decisions were on them.
    unarchived = set(world.list_unarchived_run_ids())  # type: ignore[attr-defined]
    assert not {cycle.run_id for cycle in final.manifest.cycles} & unarchived
