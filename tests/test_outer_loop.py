"""The outer loop in process (upstream's ``outer-loop.test.ts``): cycles planned and run under
a scripted supervisor, the manifest, ``OuterLoopCycleCompleted`` as the truth on resume, and
upstream's goal-mismatch, max-cycles and exhausted errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from little_dist import run_outer_loop
from little_dist.errors import InvalidInputError
from little_dist.events import EventInput
from little_dist.outer_loop import (
    CycleSummary,
    OuterLoopError,
    OuterLoopGoal,
    OuterLoopManifest,
    manifest_store_for,
)
from little_dist.planner.request import PRIOR_CYCLE_NOTE_SEPARATOR
from little_dist.testing import ScriptedModel
from little_dist.world.local import LocalWorld
from tests.outer_loop_helpers import (
    PROCESSED,
    script_decisions,
    script_planner,
    simple_workflow,
    system_text,
    user_text,
)

INPUT = {"value": "hello"}


@pytest.fixture
def world(tmp_path: Path) -> LocalWorld:
    return LocalWorld(tmp_path / "data")


def planner_calls(script: ScriptedModel) -> list[Any]:
    return script.calls_for(step="planner")


def supervisor_calls(script: ScriptedModel) -> list[Any]:
    return script.calls_for(step="supervisor")


def manifest_json(world: LocalWorld, loop_id: str) -> dict[str, Any]:
    path = world.data_dir / "outer-loops" / f"{loop_id}.json"
    data: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return data


def event_payloads(world: LocalWorld, run_id: str, event_type: str) -> list[dict[str, Any]]:
    return [event.payload for event in world.list_events(run_id) if event.type == event_type]


def goal() -> OuterLoopGoal:
    workflow = simple_workflow()
    return OuterLoopGoal(workflow.definition_hash(), workflow.description)


def seed(world: LocalWorld, loop_id: str, *cycles: CycleSummary, **fields: Any) -> None:
    fields.setdefault("max_cycles", 3)
    manifest = OuterLoopManifest(loop_id, goal(), cycles=tuple(cycles), **fields)
    manifest_store_for(world).write(manifest, expected=None)


def test_cycles_run_until_the_supervisor_says_done(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    script_planner(scripted_model)
    script_decisions(
        scripted_model,
        {"kind": "continue"},
        {"kind": "continue"},
        {"kind": "done", "finalOutput": {"result": "final-answer"}},
    )
    result = run_outer_loop(simple_workflow(), {"value": "test"}, max_outer_cycles=5, world=world)
    assert result.status == "completed"
    assert result.output == {"result": "final-answer"}
    assert len(planner_calls(scripted_model)) == 3
    assert len(supervisor_calls(scripted_model)) == 3
    loop_id = event_payloads(world, result.run_id, "OuterLoopCycleCompleted")[0]["outerLoopId"]
    manifest = manifest_json(world, loop_id)
    assert manifest["outerLoopId"] == loop_id and loop_id.startswith("ol_")
    assert manifest["maxCycles"] == 5
    assert manifest["result"] == {"kind": "done", "finalOutput": {"result": "final-answer"}}
    assert "pendingCycleRunId" not in manifest
    runs = [cycle["runId"] for cycle in manifest["cycles"]]
    assert [cycle["cycleNumber"] for cycle in manifest["cycles"]] == [1, 2, 3]
    assert result.run_id == runs[-1] and len(set(runs)) == 3
    # Each cycle's request differs (cycle number, prior cycles): its own version.
    assert len({cycle["workflowVersionId"] for cycle in manifest["cycles"]}) == 3
    request_hashes: set[str] = set()
    for number, run_id in enumerate(runs, start=1):
        (started,) = event_payloads(world, run_id, "RunStarted")
        assert started["outerLoopId"] == loop_id
        (completed,) = event_payloads(world, run_id, "OuterLoopCycleCompleted")
        kind = "done" if number == 3 else "continue"
        assert completed["outerLoopId"] == loop_id and completed["cycleNumber"] == number
        assert completed["supervise"]["kind"] == kind
        assert world.list_events(run_id)[-1].type == "OuterLoopCycleCompleted"
        (requested,) = event_payloads(world, run_id, "OrchestrationRequested")
        request_hashes.add(requested["requestHash"])
    assert len(request_hashes) == 3
    assert manifest["cycles"][0]["output"] == {"result": "processed:test"}


def test_the_planner_is_told_its_cycle_and_the_supervisors_note(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    script_planner(scripted_model)
    script_decisions(
        scripted_model,
        {"kind": "continue", "promptNote": "focus on candidate scores"},
        {"kind": "done", "finalOutput": {"result": "done"}},
    )
    run_outer_loop(simple_workflow(), INPUT, max_outer_cycles=3, world=world)
    first, second = (system_text(call) for call in planner_calls(scripted_model))
    assert "cycle 1 of at most 3" in first and "Prior cycle note" not in first
    assert "cycle 2 of at most 3" in second
    assert PRIOR_CYCLE_NOTE_SEPARATOR + "focus on candidate scores" in second
    # The supervisor sees every cycle; a cycle's summary is its `continue` note.
    one, two = (json.loads(user_text(call)) for call in supervisor_calls(scripted_model))
    assert [c["cycleNumber"] for c in one["cycles"]] == [1] and "summary" not in one["cycles"][0]
    assert two["cycles"][0]["summary"] == "focus on candidate scores"
    assert "summary" not in two["cycles"][1]
    assert two["goal"] == {
        "workflowDefinitionHash": simple_workflow().definition_hash(),
        "description": "A simple workflow for outer-loop tests.",
    }


def test_a_loop_that_never_hears_done_is_exhausted(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    script_planner(scripted_model)
    script_decisions(scripted_model, {"kind": "continue"}, {"kind": "continue"})
    with pytest.raises(OuterLoopError) as caught:
        run_outer_loop(
            simple_workflow(),
            {"value": "test"},
            max_outer_cycles=2,
            world=world,
            outer_loop_id="ol_exhausted",
        )
    error = caught.value
    assert error.cause_code == "outer_loop_exhausted"
    assert str(error) == "Outer loop exhausted after 2 cycles (outerLoopId: ol_exhausted)."
    assert error.outer_loop_id == "ol_exhausted"
    assert error.last_cycle_output == {"result": "processed:test"}
    # Upstream's "money an exhausted loop spent": the last cycle's usage, from its log (here
    # its planner call, priced as gpt-4o-mini), not a false $0.
    assert error.result is not None and error.result.usage.priced_calls == 1
    assert (error.result.usage.cost_usd or 0) > 0
    assert "result" not in manifest_json(world, "ol_exhausted")
    # Started again, the recorded loop is exhausted at once: no model is called.
    calls = len(scripted_model.calls)
    with pytest.raises(OuterLoopError, match="exhausted after 2 cycles"):
        run_outer_loop(
            simple_workflow(),
            {"value": "test"},
            max_outer_cycles=2,
            world=world,
            outer_loop_id="ol_exhausted",
        )
    assert len(scripted_model.calls) == calls


def test_a_failed_cycle_goes_to_the_supervisor_which_may_rescue_the_loop(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    script_planner(scripted_model)
    script_decisions(scripted_model, {"kind": "done", "finalOutput": {"result": "rescued"}})
    result = run_outer_loop(
        simple_workflow(), {"value": "explode"}, max_outer_cycles=3, world=world
    )
    assert result.output == {"result": "rescued"}
    (call,) = supervisor_calls(scripted_model)
    (cycle,) = json.loads(user_text(call))["cycles"]
    assert cycle["status"] == "failed" and cycle["output"] is None


def test_a_python_supervisor_decides_with_upstreams_json(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    script_planner(scripted_model)
    seen: list[dict[str, Any]] = []

    def supervise(state: dict[str, Any]) -> dict[str, Any]:
        seen.append(state)
        if len(state["cycles"]) < 2:
            return {"kind": "continue"}
        return {"kind": "done", "finalOutput": {"result": "python"}}

    result = run_outer_loop(
        simple_workflow(), INPUT, max_outer_cycles=3, world=world, supervise=supervise
    )
    assert result.output == {"result": "python"}
    assert [len(state["cycles"]) for state in seen] == [1, 2]
    assert supervisor_calls(scripted_model) == []


# -- resume ------------------------------------------------------------------------------


def test_a_done_manifest_returns_its_output_without_any_call(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    seed(
        world,
        "ol_replaydone",
        CycleSummary(1, "run_replaydonerun0001", "wfver_fake", "completed", {"result": "x"}),
        done=True,
        final_output={"value": 42},
    )
    result = run_outer_loop(
        simple_workflow(),
        {"value": "ignored"},
        max_outer_cycles=3,
        world=world,
        outer_loop_id="ol_replaydone",
    )
    assert result.status == "completed" and result.output == {"value": 42}
    assert result.run_id == "run_replaydonerun0001"
    assert scripted_model.calls == []


def test_a_loop_resumed_between_cycles_starts_the_next_with_the_recorded_note(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    seed(
        world,
        "ol_between",
        CycleSummary(
            1,
            "run_betweencycles0001",
            "wfver_fake",
            "completed",
            {"result": "c1"},
            summary="focus on X",
        ),
    )
    script_planner(scripted_model)
    script_decisions(scripted_model, {"kind": "done", "finalOutput": {"result": "cycle-2"}})
    result = run_outer_loop(
        simple_workflow(), INPUT, max_outer_cycles=3, world=world, outer_loop_id="ol_between"
    )
    assert result.output == {"result": "cycle-2"}
    (plan,) = planner_calls(scripted_model)
    assert PRIOR_CYCLE_NOTE_SEPARATOR + "focus on X" in system_text(plan)
    (call,) = supervisor_calls(scripted_model)
    assert [c["cycleNumber"] for c in json.loads(user_text(call))["cycles"]] == [1, 2]


def test_a_cycle_that_ended_before_the_crash_is_not_run_again(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    # A first loop leaves a finished cycle; its decision event is then "lost" by running the
    # cycle's run again under a new loop whose manifest names it as pending.
    script_planner(scripted_model, times=1)
    script_decisions(scripted_model, {"kind": "done", "finalOutput": {"result": "setup"}})
    setup = run_outer_loop(simple_workflow(), INPUT, max_outer_cycles=2, world=world)
    seed(world, "ol_midcycle", pending_cycle_run_id=setup.run_id)
    processed, calls = len(PROCESSED), len(scripted_model.calls)
    script_decisions(scripted_model, {"kind": "done", "finalOutput": {"result": "resumed"}})
    result = run_outer_loop(
        simple_workflow(), INPUT, max_outer_cycles=3, world=world, outer_loop_id="ol_midcycle"
    )
    # The cycle-1 decision recorded on that run (by the first loop) is the truth: "setup".
    assert result.output == {"result": "setup"}
    assert len(PROCESSED) == processed and len(scripted_model.calls) == calls
    completed = event_payloads(world, setup.run_id, "OuterLoopCycleCompleted")
    assert len(completed) == 1
    manifest = manifest_json(world, "ol_midcycle")
    assert "pendingCycleRunId" not in manifest and manifest["result"]["kind"] == "done"
    assert [cycle["runId"] for cycle in manifest["cycles"]] == [setup.run_id]


def test_a_pending_run_that_ended_without_a_decision_asks_the_supervisor_once(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    # Crash after RunCompleted, before OuterLoopCycleCompleted: the run is not run again,
    # the supervisor is asked once.
    from little_dist.authoring.options import RunOptions
    from little_dist.in_process import run_workflow_cycle
    from little_dist.outer_loop import outer_loop_context

    script_planner(scripted_model, times=1)
    workflow = simple_workflow()
    run_workflow_cycle(
        workflow,
        INPUT,
        world=world,
        run_id="run_pendingended0001",
        outer_loop_id="ol_pending",
        outer_loop=outer_loop_context(1, 3, []),
        options=RunOptions(),
    )
    seed(world, "ol_pending", pending_cycle_run_id="run_pendingended0001")
    processed = len(PROCESSED)
    script_decisions(scripted_model, {"kind": "done", "finalOutput": {"result": "resumed"}})
    result = run_outer_loop(
        workflow, INPUT, max_outer_cycles=3, world=world, outer_loop_id="ol_pending"
    )
    assert result.output == {"result": "resumed"}
    assert len(PROCESSED) == processed and len(planner_calls(scripted_model)) == 1
    assert len(supervisor_calls(scripted_model)) == 1


def test_a_recorded_continue_is_not_asked_again_and_its_note_reaches_the_next_plan(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    script_planner(scripted_model)
    script_decisions(
        scripted_model,
        {"kind": "continue", "promptNote": "X"},
        {"kind": "done", "finalOutput": {"result": "setup-done"}},
    )
    run_outer_loop(
        simple_workflow(), INPUT, max_outer_cycles=3, world=world, outer_loop_id="ol_setup"
    )
    cycle1 = manifest_json(world, "ol_setup")["cycles"][0]["runId"]
    seed(world, "ol_recorded", pending_cycle_run_id=cycle1)
    before = len(supervisor_calls(scripted_model))
    script_decisions(scripted_model, {"kind": "done", "finalOutput": {"result": "cycle-2"}})
    plans = len(planner_calls(scripted_model))
    result = run_outer_loop(
        simple_workflow(), INPUT, max_outer_cycles=3, world=world, outer_loop_id="ol_recorded"
    )
    assert result.output == {"result": "cycle-2"}
    assert len(supervisor_calls(scripted_model)) == before + 1  # cycle 2's only
    new_plans = planner_calls(scripted_model)[plans:]
    assert len(new_plans) == 1
    assert PRIOR_CYCLE_NOTE_SEPARATOR + "X" in system_text(new_plans[0])
    assert manifest_json(world, "ol_recorded")["cycles"][0]["summary"] == "X"


# -- errors --------------------------------------------------------------------------------


def test_resuming_with_another_max_outer_cycles_is_refused_before_any_call(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    seed(
        world, "ol_maxmismatch", CycleSummary(1, "run_mismatch00000001", "wfver_fake", "completed")
    )
    with pytest.raises(OuterLoopError) as caught:
        run_outer_loop(
            simple_workflow(),
            INPUT,
            max_outer_cycles=5,
            world=world,
            outer_loop_id="ol_maxmismatch",
        )
    assert caught.value.cause_code == "runtime_config_error"
    assert str(caught.value) == (
        "runtime_config_error: outer_loop_max_cycles_mismatch — existing outer loop "
        "'ol_maxmismatch' was started with maxCycles=3, caller now passed maxOuterCycles=5."
    )
    assert scripted_model.calls == []


def test_resuming_with_another_workflow_definition_is_refused_before_any_call(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    store = manifest_store_for(world)
    other = OuterLoopGoal("sha256:" + "1" * 64, "outer-loop-test.simple")
    store.write(OuterLoopManifest("ol_goalmismatch", other, 3), expected=None)
    before = (world.data_dir / "outer-loops" / "ol_goalmismatch.json").read_bytes()
    with pytest.raises(OuterLoopError, match="outer_loop_goal_mismatch") as caught:
        run_outer_loop(
            simple_workflow(description="Another goal."),
            INPUT,
            max_outer_cycles=3,
            world=world,
            outer_loop_id="ol_goalmismatch",
        )
    assert caught.value.cause_code == "runtime_config_error"
    assert "\n" not in str(caught.value)
    assert scripted_model.calls == []
    assert (world.data_dir / "outer-loops" / "ol_goalmismatch.json").read_bytes() == before


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, float("nan"), "3"])
def test_max_outer_cycles_must_be_a_positive_integer(world: LocalWorld, bad: Any) -> None:
    with pytest.raises(InvalidInputError, match="max_outer_cycles must be a positive integer"):
        run_outer_loop(simple_workflow(), INPUT, max_outer_cycles=bad, world=world)
    assert not (world.data_dir / "outer-loops").exists()


def test_a_bad_input_or_loop_id_is_refused_before_anything_is_written(
    world: LocalWorld,
) -> None:
    with pytest.raises(InvalidInputError, match="invalid input"):
        run_outer_loop(simple_workflow(), {"value": 3}, max_outer_cycles=2, world=world)
    with pytest.raises(InvalidInputError, match="Invalid outer-loop id"):
        run_outer_loop(
            simple_workflow(), INPUT, max_outer_cycles=2, world=world, outer_loop_id="../x"
        )
    assert not (world.data_dir / "outer-loops").exists()
    assert world.list_run_ids() == []


def test_a_supervisor_reply_that_is_not_a_decision_is_named(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    from little_dist.outer_loop import SupervisorError

    script_planner(scripted_model)
    scripted_model.on(step="supervisor").reply_text("I think it is fine.")
    with pytest.raises(
        SupervisorError, match=r"supervisor model 'scripted/planner'.*expected a decision"
    ):
        run_outer_loop(
            simple_workflow(), INPUT, max_outer_cycles=2, world=world, outer_loop_id="ol_badreply"
        )
    # The cycle is pending in the manifest: a resume re-enters it without running it again.
    assert manifest_json(world, "ol_badreply")["pendingCycleRunId"].startswith("run_")


def test_an_outer_loop_event_after_the_run_end_is_recorded_once(world: LocalWorld) -> None:
    # What resume relies on: the sealed log takes the decision, once per cycle.
    world.append("run_sealed0000000001", EventInput(type="RunStarted", payload={}))
    world.append(
        "run_sealed0000000001",
        EventInput(type="RunCompleted", occurrence_id="run-end", payload={}),
    )
    event = EventInput(
        type="OuterLoopCycleCompleted",
        occurrence_id="outer-loop:cycle:1",
        payload={"outerLoopId": "ol_x", "cycleNumber": 1, "supervise": {"kind": "continue"}},
    )
    assert world.append("run_sealed0000000001", event) == world.append(
        "run_sealed0000000001", event
    )


@pytest.mark.integration
def test_a_loop_on_redis_s3_keeps_its_manifest_in_redis_and_archives_each_decided_cycle(
    redis_url: str,
    redis_key_prefix: str,
    s3_service: Any,
    tmp_path: Path,
    scripted_model: ScriptedModel,
) -> None:
    from urllib.parse import quote

    from little_dist.outer_loop.manifest import manifest_text
    from little_dist.outer_loop.redis_s3 import RedisS3ManifestStore
    from little_dist.world.redis_s3 import RedisS3World

    world = RedisS3World.from_url(
        f"{redis_url}?key_prefix={quote(redis_key_prefix + tmp_path.name + ':')}"
        f"&s3_prefix={quote(s3_service.prefix + tmp_path.name + '/')}",
        s3_endpoint=s3_service.endpoint,
        s3_bucket=s3_service.bucket,
        aws_access_key_id=s3_service.access_key_id,
        aws_secret_access_key=s3_service.secret_access_key,
    )
    try:
        script_planner(scripted_model)
        script_decisions(
            scripted_model,
            {"kind": "continue", "promptNote": "again"},
            {"kind": "done", "finalOutput": {"result": "on redis"}},
        )
        result = run_outer_loop(
            simple_workflow(), INPUT, max_outer_cycles=3, world=world, outer_loop_id="ol_redis"
        )
        assert result.output == {"result": "on redis"}
        store = manifest_store_for(world)
        assert isinstance(store, RedisS3ManifestStore)
        stored = store.read("ol_redis")
        assert stored is not None and stored.manifest.done and stored.etag == "4"
        # Four writes (pending, cycle 1, pending, done), each revision mirrored to S3.
        last = world._s3.get(  # type: ignore[attr-defined]
            store.mirror_key("ol_redis", 4, manifest_text(stored.manifest).encode())
        )
        assert last == manifest_text(stored.manifest).encode()
        for number, cycle in enumerate(stored.manifest.cycles, start=1):
            archived = world._s3.get(  # type: ignore[attr-defined]
                f"{s3_service.prefix}{tmp_path.name}/archives/{cycle.run_id}.ndjson"
            )
            assert archived is not None, "the decided cycle's run was archived"
            lines = [json.loads(line) for line in archived.decode().splitlines()]
            events = [line for line in lines if "type" in line]
            assert events[-1]["type"] == "OuterLoopCycleCompleted"
            assert events[-1]["payload"]["cycleNumber"] == number
    finally:
        world.close()


def test_when_another_process_records_the_cycles_decision_first_that_one_holds(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    # Two processes resuming one cycle may both ask a supervisor; the decision appended
    # first is the cycle's, and the loop that lost the race follows it.
    script_planner(scripted_model)

    def supervise(state: dict[str, Any]) -> dict[str, Any]:
        run_id = state["cycles"][-1]["runId"]
        world.append(
            run_id,
            EventInput(
                type="OuterLoopCycleCompleted",
                occurrence_id="outer-loop:cycle:1",
                payload={
                    "outerLoopId": "ol_race",
                    "cycleNumber": 1,
                    "supervise": {"kind": "done", "finalOutput": {"result": "the other's"}},
                },
            ),
        )
        return {"kind": "continue", "promptNote": "mine"}

    result = run_outer_loop(
        simple_workflow(),
        INPUT,
        max_outer_cycles=3,
        world=world,
        outer_loop_id="ol_race",
        supervise=supervise,
    )
    assert result.output == {"result": "the other's"}
    manifest = manifest_json(world, "ol_race")
    assert manifest["result"]["finalOutput"] == {"result": "the other's"}
    assert len(manifest["cycles"]) == 1 and "summary" not in manifest["cycles"][0]


def test_a_supervisor_that_is_not_callable_is_upstreams_config_error(world: LocalWorld) -> None:
    with pytest.raises(OuterLoopError, match="outer_loop_requested_without_supervise_adapter"):
        run_outer_loop(
            simple_workflow(),
            INPUT,
            max_outer_cycles=2,
            world=world,
            supervise="yes",  # type: ignore[arg-type]
        )
    assert world.list_run_ids() == []


# -- through run_workflow (upstream's runWorkflow({maxOuterCycles})) ------------------------


def test_run_workflow_with_max_outer_cycles_runs_an_outer_loop(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    from little_dist import run_workflow

    script_planner(scripted_model)
    script_decisions(
        scripted_model,
        {"kind": "continue"},
        {"kind": "done", "finalOutput": {"result": "looped"}},
    )
    result = run_workflow(
        simple_workflow(), INPUT, world=world, max_outer_cycles=3, outer_loop_id="ol_viarun"
    )
    assert result.output == {"result": "looped"}
    assert len(manifest_json(world, "ol_viarun")["cycles"]) == 2


def test_run_workflow_with_one_cycle_is_a_plain_run(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    from little_dist import run_workflow

    script_planner(scripted_model)
    result = run_workflow(simple_workflow(), INPUT, world=world, max_outer_cycles=1)
    assert result.output == {"result": "processed:hello"}
    (started,) = event_payloads(world, result.run_id, "RunStarted")
    assert "outerLoopId" not in started
    assert supervisor_calls(scripted_model) == []
    assert not (world.data_dir / "outer-loops").exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_outer_cycles": 0}, "max_outer_cycles must be a positive integer"),
        ({"max_outer_cycles": 2.0}, "max_outer_cycles must be a positive integer"),
        ({"max_outer_cycles": 2, "run_id": "run_x0000000000"}, "not run_id or parent"),
        ({"outer_loop_id": "ol_x"}, "need max_outer_cycles > 1"),
    ],
)
def test_run_workflow_refuses_outer_loop_options_that_do_not_fit(
    world: LocalWorld, options: dict[str, Any], message: str
) -> None:
    from little_dist import run_workflow

    with pytest.raises(InvalidInputError, match=message):
        run_workflow(simple_workflow(), INPUT, world=world, **options)
    assert world.list_run_ids() == []


def test_a_supervisor_model_that_fails_stops_the_loop_and_a_resume_asks_again(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    from little_dist.outer_loop import SupervisorError

    script_planner(scripted_model)
    scripted_model.fail(step="supervisor", times=1, error="rate_limit")
    scripted_model.on(step="supervisor").reply_text(
        '```json\n{"kind": "done", "finalOutput": {"result": "fenced"}}\n```'
    )
    processed = len(PROCESSED)
    with pytest.raises(
        SupervisorError, match="supervisor model 'scripted/planner' failed"
    ) as caught:
        run_outer_loop(
            simple_workflow(), INPUT, max_outer_cycles=2, world=world, outer_loop_id="ol_flaky"
        )
    assert "\n" not in str(caught.value)
    result = run_outer_loop(
        simple_workflow(), INPUT, max_outer_cycles=2, world=world, outer_loop_id="ol_flaky"
    )
    assert result.output == {"result": "fenced"}
    assert len(PROCESSED) == processed + 1  # the cycle ran once
    assert len(planner_calls(scripted_model)) == 1
    assert len(supervisor_calls(scripted_model)) == 2


def test_cycle_versions_are_not_offered_for_reuse_to_plain_runs(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    # A cycle's plan answers the supervisor's note for that cycle; a later plain run of the
    # definition plans for itself rather than reusing it.
    script_planner(scripted_model)
    script_decisions(scripted_model, {"kind": "done", "finalOutput": {"result": "x"}})
    workflow = simple_workflow()
    run_outer_loop(workflow, INPUT, max_outer_cycles=2, world=world)
    assert world.indexed_versions(workflow.definition_hash()) == []


def test_in_process_options_are_refused_with_a_fleet_client(tmp_path: Path) -> None:
    from little_dist.fleet.client import Client
    from little_dist.settings import load_settings
    from little_dist.world.in_process import MemoryWorld

    client = Client(load_settings({}), world=MemoryWorld())
    with pytest.raises(InvalidInputError, match="progress run cycles in this process"):
        run_outer_loop(simple_workflow(), INPUT, max_outer_cycles=2, client=client, progress=print)
    with pytest.raises(InvalidInputError, match="the loop's world is the client's"):
        run_outer_loop(
            simple_workflow(),
            INPUT,
            max_outer_cycles=2,
            client=client,
            world=LocalWorld(tmp_path / "data"),
        )
