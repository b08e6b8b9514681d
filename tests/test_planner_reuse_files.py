"""The planner reads its reuse candidate as files (upstream's ``materializePlannerReuseDetails``
and its test "mounts advertised planner reuse detail files for bash harness planners"): the
brief names ``/planner/reuse/<id>/lwir.json`` and five siblings, they are there, read-only, in
the planner's bash sandbox, and a planner that reads the candidate's LWIR and reuses it runs
it. In process and on the fleet (a real ``little worker`` plans)."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from little_dist.api import run_workflow
from little_dist.canonical import canonical_json
from little_dist.events import Event
from little_dist.planner import PlannerError, reuse_files
from little_dist.planner.reuse_files import DETAIL_FILES, detail_files, mounted_reuse_details
from little_dist.planner.review import select_reuse_candidates
from little_dist.sandbox import Mount
from little_dist.sandbox.mounts import MountError
from little_dist.testing import ScriptedModel
from little_dist.world.base import World
from little_dist.world.in_process import MemoryWorld
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.planner_reuse_app import summarizer, summary_lwir

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

FIRST = {"ticketId": "T-1", "body": "Cannot export invoices."}
SECOND = {"ticketId": "T-2", "body": "Cannot import receipts."}
#: Upstream's vector: every advertised file is readable.
READ_ALL = " && ".join(
    [f"cat /planner/reuse/*/{name} >/dev/null" for name in DETAIL_FILES]
    + ["printf reuse-details-readable"]
)


def first_run(world: World, scripted: ScriptedModel) -> Any:
    scripted.on(step="planner", run="run_first").reply_json(summary_lwir())
    return run_workflow(summarizer, FIRST, world=world, run_id="run_first")


def reuse(version_id: str) -> dict[str, Any]:
    return {
        "kind": "reuse_unchanged",
        "workflowVersionId": version_id,
        "rationale": "The candidate already summarizes tickets.",
    }


def planner_tool_results(events: list[Event]) -> list[dict[str, Any]]:
    return [
        e.payload["result"]
        for e in events
        if e.type == "harness.tool_call.succeeded" and e.payload.get("stepPath") == "planner"
    ]


def test_the_planner_cats_the_candidates_lwir_and_reuses_it(
    scripted_model: ScriptedModel,
) -> None:
    world = MemoryWorld()
    first = first_run(world, scripted_model)
    version_id = first.workflow_version_id
    lwir_path = f"/planner/reuse/{version_id}/lwir.json"
    scripted_model.on(step="planner", run="run_second").call_tool(
        "bash", {"cmd": f"cat {lwir_path}"}
    ).then_call_tool("bash", {"cmd": READ_ALL}).then_reply_json(reuse(version_id))

    second = run_workflow(summarizer, SECOND, world=world, run_id="run_second")

    assert second.status == "completed"
    assert second.workflow_version_id == version_id
    assert second.output == {"summary": "T-2: Cannot import receipts."}
    events = world.list_events("run_second")
    stored = world.get_version(version_id)["lwir"]
    read, read_all = planner_tool_results(events)
    assert read == {"stdout": canonical_json(stored) + "\n", "stderr": "", "exitCode": 0}
    assert read_all == {"stdout": "reuse-details-readable", "stderr": "", "exitCode": 0}
    calls = scripted_model.calls_for(step="planner", run="run_second")
    assert len(calls) == 3
    assert all(call.tool_names == ["bash"] for call in calls)
    system = str(calls[0].messages[0]["content"])
    for name in DETAIL_FILES:
        assert f"/planner/reuse/{version_id}/{name}" in system
    # What the model read is what its next turn is shown.
    assert json.loads(calls[1].tool_results[-1]["content"]) == read
    types = [e.type for e in events]
    assert types.count("harness.runtime.command.succeeded") == 2
    decided = [e.payload for e in events if e.type == "PlannerReuseDecisionRecorded"]
    assert decided[0]["candidateWorkflowVersionId"] == version_id
    # The planner's session is recorded like a step's: started, its calls, completed.
    session = [e.type for e in events if e.payload.get("stepPath") == "planner"]
    assert session[0] == "harness.session.started" and session[-1] == "harness.session.completed"


def test_a_planner_without_a_candidate_is_offered_no_shell(scripted_model: ScriptedModel) -> None:
    world = MemoryWorld()
    first_run(world, scripted_model)
    (call,) = scripted_model.calls_for(step="planner", run="run_first")
    assert call.tool_names == []


def test_the_files_hold_upstreams_contents(scripted_model: ScriptedModel) -> None:
    world = MemoryWorld()
    first = first_run(world, scripted_model)
    (candidate,) = select_reuse_candidates(world, summarizer.id)
    files = detail_files(candidate)
    assert list(files) == list(DETAIL_FILES)
    lock = candidate.version.lock
    assert files["lock.json"] == canonical_json(lock) + "\n"
    assert files["prior-input-summary.md"] == (
        f"# Prior Input Summary\n\nWorkflowVersion: {first.workflow_version_id}\n"
        f"Run: run_first\nInput hash: {lock['inputHash']}\n"
        f"Input structure hash: {lock['plannedInputStructureHash']}\n"
    )
    assert files["prior-output-summary.md"].endswith(
        'Output: {"summary":"T-1: Cannot export invoices."}\n'
    )
    assert "No structured feedback is attached to this candidate." in files["feedback-summary.md"]
    # A long prior output is cut to upstream's 240 characters.
    long = dataclasses.replace(candidate, prior_output={"summary": "x" * 500})
    line = detail_files(long)["prior-output-summary.md"].splitlines()[-1]
    assert len(line.removeprefix("Output: ")) == 240 and line.endswith("...")


@pytest.mark.parametrize(
    "odd", ["../escape", "a/b", ".", "..", "with\0nul", "x" * 256, "", "-rf", "/abs"]
)
def test_a_version_id_that_is_not_a_plain_name_never_names_a_folder(
    scripted_model: ScriptedModel, odd: str
) -> None:
    world = MemoryWorld()
    first_run(world, scripted_model)
    (candidate,) = select_reuse_candidates(world, summarizer.id)
    before = set(os.listdir(tempfile.gettempdir()))
    with mounted_reuse_details((dataclasses.replace(candidate, workflow_version_id=odd),)) as m:
        assert m is None
    assert set(os.listdir(tempfile.gettempdir())) - before == set()


def test_a_huge_file_is_replaced_by_a_note_and_the_folder_is_removed(
    scripted_model: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = MemoryWorld()
    first_run(world, scripted_model)
    (candidate,) = select_reuse_candidates(world, summarizer.id)
    monkeypatch.setattr(reuse_files, "MAX_FILE_BYTES", 200)
    with mounted_reuse_details((candidate,)) as mount:
        assert mount is not None and mount.target == "/planner/reuse" and not mount.writable
        folder = Path(mount.source) / candidate.workflow_version_id
        assert sorted(os.listdir(folder)) == sorted(DETAIL_FILES)
        note = (folder / "lwir.json").read_text()
        assert note.startswith("[lwir.json is ") and "over the 200-byte limit" in note
        assert (folder / "feedback-summary.md").stat().st_size < 200  # small ones stay
        assert all((folder / name).stat().st_mode & 0o222 == 0 for name in DETAIL_FILES)
    assert not Path(mount.source).exists()


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_fleet_planner_reads_the_candidate_and_reuses_it(
    fleet_env: FleetEnv, tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    world = fleet_env.world()
    first = first_run(world, scripted_model)  # in this process, against the fleet's world
    version_id = first.workflow_version_id
    script = ScriptedModel()
    script.on(step="planner", contains=SECOND["body"]).call_tool(
        "bash", {"cmd": f"cat /planner/reuse/{version_id}/lwir.json"}
    ).then_reply_json(reuse(version_id))
    fleet_env.env["LITTLE_SCRIPTED_MODEL"] = str(script.save(tmp_path / "script.json"))
    start_scheduler(fleet_env)
    start_worker(fleet_env, app="tests.planner_reuse_app", concurrency=2)

    client = fleet_env.client()
    run_id = client.submit(summarizer, SECOND)
    state = client.wait(run_id, timeout=120)

    assert state.status == "completed", state
    assert state.output == {"summary": "T-2: Cannot import receipts."}
    events = world.list_events(run_id)
    stored = world.get_version(version_id)["lwir"]
    assert planner_tool_results(events) == [
        {"stdout": canonical_json(stored) + "\n", "stderr": "", "exitCode": 0}
    ]
    started = [e for e in events if e.type == "RunStarted"]
    assert started[-1].payload["workflowVersionId"] == version_id


def test_a_resumed_planning_session_replays_the_shell_and_runs_nothing_again(
    scripted_model: ScriptedModel,
) -> None:
    world = MemoryWorld()
    version_id = first_run(world, scripted_model).workflow_version_id
    cat = {"cmd": f"cat /planner/reuse/{version_id}/lwir.json"}
    scripted_model.on(step="planner", run="run_second").call_tool("bash", cat).then_raise_error(
        "auth"
    )
    with pytest.raises(PlannerError, match="planner model"):
        run_workflow(summarizer, SECOND, world=world, run_id="run_second")
    scripted_model.on(step="planner", run="run_second").reply_json(reuse(version_id))

    resumed = run_workflow(summarizer, SECOND, world=world, run_id="run_second")

    assert resumed.status == "completed" and resumed.workflow_version_id == version_id
    events = world.list_events("run_second")
    commands = [e for e in events if e.type == "harness.runtime.command.succeeded"]
    assert len(commands) == 1  # the resumed session took the recorded result
    turns = [
        (call.messages[-1]["role"], len(call.messages))
        for call in scripted_model.calls_for(step="planner", run="run_second")
    ]
    # turn 1; turn 2 (failed); turn 2 again, with the same recorded tool result, not turn 1
    assert turns == [("user", 2), ("tool", 4), ("tool", 4)]


def test_the_reuse_root_takes_read_only_mounts_only(tmp_path: Path) -> None:
    assert Mount(tmp_path, "/planner/reuse").target == "/planner/reuse"
    with pytest.raises(MountError, match=r"must be under /mnt or /work$"):
        Mount(tmp_path, "/planner/reuse", writable=True)
    for target in ("/planner", "/planner/other", "/planner/reuse/../x"):
        with pytest.raises(MountError, match=r"must be under|normalised"):
            Mount(tmp_path, target)
