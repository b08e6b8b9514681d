"""``report_outcome`` records upstream's side-channel ``outcome.reported`` on a run, after its
end, without changing the run (upstream's ``reportHarnessOutcome``; issue 35, item 8)."""

from __future__ import annotations

from typing import Any

from little_dist import define_workflow, model, run_workflow
from little_dist.event_types import parse_event
from little_dist.harness import report_outcome
from little_dist.testing import ScriptedModel, Usage
from little_dist.world.in_process import MemoryWorld

SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def _workflow() -> Any:
    plan = {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "outcome.demo", "version": "1.0.0"},
        "input": {"schema": {"type": "object"}},
        "output": {"schema": SCHEMA},
        "permissions": {"models": ["fast"]},
        "steps": [
            {
                "id": "answer",
                "uses": "ai.generate",
                "with": {"model": "fast", "prompt": "Say hi to {{ input.name }}"},
                "output": {"mode": "object", "schema": SCHEMA},
            }
        ],
    }
    return define_workflow(
        id="outcome.demo",
        input={"type": "object"},
        output=SCHEMA,
        model=model("scripted/fast", id="fast"),
        plan=plan,
    )


def _finished_run(scripted_model: ScriptedModel) -> tuple[MemoryWorld, str]:
    world = MemoryWorld()
    scripted_model.on(step="answer").reply_json({"text": "hi"}, usage=Usage(10, 2))
    result = run_workflow(_workflow(), {"name": "Ada"}, world=world, run_id="run_outcome")
    assert result.status == "completed"
    return world, "run_outcome"


def test_an_outcome_is_recorded_after_the_end_and_changes_nothing(
    scripted_model: ScriptedModel,
) -> None:
    world, run_id = _finished_run(scripted_model)
    events = world.list_events(run_id)
    (called,) = [e for e in events if e.type == "harness.model.called"]

    report = report_outcome(
        world,
        run_id,
        status="failure",
        source="chat-sdk",
        score=0.25,
        detail="wrong greeting",
        reporter="user:7",
        report_key="msg-1",
        metadata={"platformMessageId": "m-9", "status": "ignored: the known field wins"},
    )

    assert report.recorded and report.errors == []
    assert report.event is not None and report.event.type == "outcome.reported"
    assert report.event.payload == {
        "platformMessageId": "m-9",
        "status": "failure",
        "source": "chat-sdk",
        "score": 0.25,
        "detail": "wrong greeting",
        "reporter": "user:7",
        "reportKey": "msg-1",
        "promptHash": called.payload["promptHash"],
    }
    after = world.list_events(run_id)
    assert after[:-1] == events and after[-1] == report.event
    assert parse_event(report.event.to_json()).type == "outcome.reported"  # the catalogue reads it
    # An observation is never a run input: reading the run back gives the same result, and no
    # model is called again.
    calls = len(scripted_model.calls)
    again = run_workflow(_workflow(), {"name": "Ada"}, world=world, run_id=run_id)
    assert again.status == "completed" and again.state.output == {"text": "hi"}
    assert len(scripted_model.calls) == calls


def test_defaults_and_joinable_fields_left_out_when_unknown(scripted_model: ScriptedModel) -> None:
    world, run_id = _finished_run(scripted_model)

    plain = report_outcome(world, run_id, status="success", step_path="no-such-step")

    assert plain.recorded and plain.event is not None
    # No model call of that step: no promptHash, never a placeholder.
    assert plain.event.payload == {
        "status": "success",
        "source": "programmatic",
        "stepPath": "no-such-step",
    }
    retracted = report_outcome(world, run_id, status="success", retracted=True, prompt_hash="p")
    assert retracted.event is not None
    assert retracted.event.payload["retracted"] is True
    assert retracted.event.payload["promptHash"] == "p"


def test_reporting_never_raises(scripted_model: ScriptedModel) -> None:
    world, run_id = _finished_run(scripted_model)
    count = len(world.list_events(run_id))

    bad = report_outcome(world, run_id, status="great")
    missing = report_outcome(world, "run_nobody", status="success")

    assert not bad.recorded and bad.event is None
    assert len(bad.errors) == 1 and bad.errors[0].startswith("invalid outcome: status:")
    assert not missing.recorded and missing.errors == ["no such run: run_nobody"]
    assert len(world.list_events(run_id)) == count
    assert world.list_events("run_nobody") == []
