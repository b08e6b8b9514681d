"""The event catalogue: names, typed payloads, the one discriminated-union adapter."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from little_dist.event_types import (
    EVENT_ADAPTER,
    EVENT_CLASSES,
    PAYLOAD_MODELS,
    EngineEvent,
    EventValidationError,
    UnknownEventTypeError,
    event_input,
    parse_event,
    typed,
    validate_payload,
)
from little_dist.event_types.harness_trace_payloads import (
    HarnessRuntimeCommandSucceededPayload,
    HarnessRuntimeTierEscalatedPayload,
)
from little_dist.events import (
    EVENT_TYPES,
    HARNESS_EVENT_TYPES,
    HARNESS_TRACE_EVENT_TYPES,
    LEGACY_HARNESS_EVENT_TYPES,
    PERMISSION_EVENT_TYPES,
    SIDE_CHANNEL_EVENT_TYPES,
    WORLD_EVENT_TYPES,
    Event,
    EventInput,
    is_engine_event_type,
    normalize_event_type,
    recorded_event,
)
from tests.conftest import load_vectors

USAGE = {"inputTokens": 10, "outputTokens": 2}
ERROR = {"name": "Error", "message": "boom"}

CAPTURED = {"captured": True, "preview": ""}
AFTER = {"bytes": 3, "sha256": "ab" * 32}
FILE = {"path": "/session/a.txt", "kind": "file"}
NO_DIFF = {"available": False, "reason": "disabled"}
NO_CHANGES: dict[str, list[Any]] = {"created": [], "updated": [], "deleted": []}
TIER = {"from": "in-process", "to": "sandbox", "trigger": "classification", "command": "cargo b"}

#: The smallest payload of each of upstream's other harness types (and ``outcome.reported``),
#: after little-harness ``trace/validate.ts``.
TRACE_MINIMAL: dict[str, dict[str, Any]] = {
    "harness.runtime.command.started": {"command": "ls"},
    "harness.runtime.command.succeeded": {
        "command": "ls",
        "exitCode": 0,
        "durationMs": 4,
        "stdout": CAPTURED,
        "stderr": CAPTURED,
    },
    "harness.runtime.command.failed": {
        "command": "false",
        "exitCode": 1,
        "durationMs": 4,
        "stdout": CAPTURED,
        "stderr": CAPTURED,
    },
    "harness.runtime.command.denied": {"command": "rm -rf /", "reasons": [{"kind": "danger"}]},
    "harness.runtime.tier.escalated": TIER,
    "harness.runtime.tier.unavailable": {**TIER, "detail": "no sandbox"},
    "harness.runtime.error": {"error": ERROR},
    "harness.runtime.dispose.failed": {"error": "teardown failed"},
    "harness.file.created": {
        "path": "/session/a.txt",
        "root": "session",
        "after": AFTER,
        "diff": NO_DIFF,
    },
    "harness.file.updated": {
        "path": "/session/a.txt",
        "root": "session",
        "before": AFTER,
        "after": AFTER,
        "diff": NO_DIFF,
    },
    "harness.file.deleted": {
        "path": "/session/a.txt",
        "root": "session",
        "before": AFTER,
        "diff": NO_DIFF,
    },
    "harness.file.staged_from_message": {
        "path": "/session/a.txt",
        "root": "session",
        "source": "message",
        "after": AFTER,
    },
    "harness.file.staged_from_host": {
        "path": "/session/a.txt",
        "root": "session",
        "source": "host",
        "after": AFTER,
    },
    "harness.file.written_by_tool": {
        "path": "/artifacts/r.txt",
        "root": "artifacts",
        "after": AFTER,
        "diff": NO_DIFF,
    },
    "harness.artifact.created": {
        "path": "/artifacts/r.txt",
        "artifact": {"id": "art_1", "path": "/artifacts/r.txt"},
    },
    "harness.filesystem.mounted": {
        "root": "session",
        "harnessDir": "/session",
        "source": "session",
        "writable": True,
        "fileCount": 1,
        "files": [FILE],
    },
    "harness.persistent_dir.loaded": {
        "harnessDir": "/persistent/notes",
        "commit": "after-turn",
        "durationMs": 2,
        "fileCount": 0,
        "files": [],
    },
    "harness.persistent_dir.commit.started": {
        "harnessDir": "/persistent/notes",
        "commit": "after-turn",
        "changeCounts": {"created": 0, "updated": 0, "deleted": 0},
        "changes": NO_CHANGES,
    },
    "harness.persistent_dir.commit.succeeded": {
        "harnessDir": "/persistent/notes",
        "commit": "manual",
        "changeCounts": {"created": 1, "updated": 0, "deleted": 0},
        "changes": {**NO_CHANGES, "created": [FILE]},
        "durationMs": 3,
    },
    "harness.persistent_dir.commit.failed": {
        "harnessDir": "/persistent/notes",
        "commit": "manual",
        "changeCounts": {"created": 0, "updated": 0, "deleted": 0},
        "changes": NO_CHANGES,
        "durationMs": 3,
        "error": ERROR,
    },
    "outcome.reported": {"status": "success", "source": "review"},
}

#: The smallest payload each type accepts (its required fields).
MINIMAL: dict[str, dict[str, Any]] = {
    **{name: {} for name in EVENT_TYPES},
    **{
        name: {"stepPath": "a"}
        for name in EVENT_TYPES
        if name.startswith(("Step", "Parallel")) or name.startswith("harness.execute_step")
    },
    "ArtifactCreated": {"artifactRef": "artifact://art_0123456789abcdef"},
    "harness.session.started": {
        "runId": "run_a",
        "role": "worker.ai-generate",
        "task": {"kind": "execute_step"},
        "manifest": {},
        "manifestHash": "sha256:x",
    },
    "harness.session.completed": {"runId": "run_a", "usage": USAGE},
    "harness.session.failed": {"runId": "run_a", "error": ERROR},
    "harness.model.called": {
        "turn": 1,
        "promptHash": "sha256:x",
        "request": {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": []},
    },
    "harness.model.responded": {"turn": 1, "response": {"usage": USAGE}},
    "harness.model.failed": {"turn": 1, "error": ERROR, "durationMs": 3},
    "harness.tool_call.started": {"callId": "c", "caller": "code", "toolName": "t", "args": None},
    "harness.tool_call.succeeded": {"callId": "c", "result": None},
    "harness.tool_call.failed": {"callId": "c", "error": ERROR},
    **TRACE_MINIMAL,
    "harness.permission.decided": {
        "callId": "c",
        "toolName": "bash",
        "caller": "model",
        "action": "deny",
        "decision": "deny",
        "reason": "rule",
    },
}


def envelope(event_type: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "eventId": "evt_0123456789abcdef",
        "runId": "run_a",
        "sequence": 1,
        "type": event_type,
        "recordedAt": "2026-05-19T18:43:11.452Z",
        "payload": payload,
        **extra,
    }


def vector_events() -> list[dict[str, Any]]:
    events = [e for case in load_vectors("run_state") for e in case["events"]]
    events += [e for report in load_vectors("pricing")["run_reports"] for e in report["events"]]
    return events


def test_catalogue_names_agree() -> None:
    assert len(WORLD_EVENT_TYPES) == 39
    assert len(HARNESS_TRACE_EVENT_TYPES) == 20
    assert PERMISSION_EVENT_TYPES == ("harness.permission.decided",)
    assert (
        EVENT_TYPES
        == WORLD_EVENT_TYPES
        + HARNESS_TRACE_EVENT_TYPES
        + SIDE_CHANNEL_EVENT_TYPES
        + PERMISSION_EVENT_TYPES
    )
    assert len(EVENT_TYPES) == len(set(EVENT_TYPES)) == 61
    assert tuple(PAYLOAD_MODELS) == EVENT_TYPES
    assert tuple(EVENT_CLASSES) == EVENT_TYPES
    # Only the workflow's own harness events ever had PascalCase names.
    assert set(LEGACY_HARNESS_EVENT_TYPES.values()) == HARNESS_EVENT_TYPES - set(
        HARNESS_TRACE_EVENT_TYPES
    ) - set(PERMISSION_EVENT_TYPES)
    assert {t for t in EVENT_TYPES if t.startswith("harness.")} == HARNESS_EVENT_TYPES
    assert set(TRACE_MINIMAL) == {*HARNESS_TRACE_EVENT_TYPES, *SIDE_CHANNEL_EVENT_TYPES}


def test_a_log_with_every_upstream_harness_type_is_read_and_written_back() -> None:
    # Upstream's harness records these beside the workflow's events; such a log must read.
    log = [
        envelope(event_type, payload, sequence=index, eventId=f"evt_{index:016x}")
        for index, (event_type, payload) in enumerate(TRACE_MINIMAL.items(), start=1)
    ]
    parsed = [parse_event(event) for event in log]
    assert [event.type for event in parsed] == list(TRACE_MINIMAL)
    assert [event.to_json() for event in parsed] == log
    assert [typed(Event.model_validate(event)).to_json() for event in log] == log


def test_upstream_shaped_trace_payloads_are_typed() -> None:
    succeeded = parse_event(
        envelope(
            "harness.runtime.command.succeeded",
            {
                "command": "printf 'x' > /session/n.md",
                "exitCode": 0,
                "durationMs": 12.5,
                "stdout": {"captured": True, "preview": "x", "truncated": False},
                "stderr": {"captured": True, "preview": ""},
                "cwd": "/session",
            },
        )
    ).payload
    assert isinstance(succeeded, HarnessRuntimeCommandSucceededPayload)
    assert succeeded.exit_code == 0
    assert succeeded.stdout.preview == "x"
    assert succeeded.to_json()["cwd"] == "/session"  # unknown fields are kept
    tier = parse_event(envelope("harness.runtime.tier.escalated", TIER)).payload
    assert isinstance(tier, HarnessRuntimeTierEscalatedPayload)
    assert tier.from_ == "in-process"
    assert tier.to_json() == TIER  # written back as "from"
    built = PAYLOAD_MODELS["outcome.reported"].model_validate(
        {"status": "partial", "source": "review", "score": 0.5, "stepPath": "draft"}
    )
    assert event_input("outcome.reported", built).payload == {
        "status": "partial",
        "source": "review",
        "score": 0.5,
        "stepPath": "draft",
    }


@pytest.mark.parametrize(
    ("event_type", "payload", "field"),
    [
        ("harness.runtime.command.succeeded", {"exitCode": "0"}, "exitCode"),
        ("harness.file.created", {"path": "session/a.txt"}, "path"),
        ("harness.file.staged_from_host", {"root": "elsewhere"}, "root"),
        ("harness.artifact.created", {"path": "/session/r.txt"}, "path"),
        ("harness.filesystem.mounted", {"source": "cloud"}, "source"),
        ("harness.persistent_dir.loaded", {"harnessDir": "/tmp/x"}, "harnessDir"),
        ("harness.runtime.tier.escalated", {"trigger": "whim"}, "trigger"),
        ("outcome.reported", {"status": "great"}, "status"),
    ],
)
def test_trace_payload_fields_are_checked(
    event_type: str, payload: dict[str, Any], field: str
) -> None:
    with pytest.raises(EventValidationError, match=field):
        parse_event(envelope(event_type, {**TRACE_MINIMAL[event_type], **payload}))


@pytest.mark.parametrize("event", vector_events(), ids=lambda e: f"{e['runId']}-{e['sequence']}")
def test_every_vector_event_parses_and_writes_back_unchanged(event: dict[str, Any]) -> None:
    parsed = parse_event(event)
    assert parsed.to_json() == event
    stored = Event.model_validate(event)
    assert typed(stored).to_json() == stored.to_json()
    assert parsed.to_event() == stored


@pytest.mark.parametrize("event_type", EVENT_TYPES)
def test_every_type_parses_its_minimal_payload(event_type: str) -> None:
    parsed = parse_event(envelope(event_type, MINIMAL[event_type]))
    assert type(parsed) is EVENT_CLASSES[event_type]
    assert parsed.type == event_type
    assert isinstance(parsed.payload, PAYLOAD_MODELS[event_type])
    assert parsed.to_json()["payload"] == MINIMAL[event_type]


@pytest.mark.parametrize("event_type", [t for t in EVENT_TYPES if MINIMAL[t]])
def test_required_payload_fields_are_required(event_type: str) -> None:
    for missing in MINIMAL[event_type]:
        payload = {k: v for k, v in MINIMAL[event_type].items() if k != missing}
        with pytest.raises(EventValidationError, match=missing):
            parse_event(envelope(event_type, payload))


def test_typed_fields_use_python_names_and_camel_case_on_the_wire() -> None:
    parsed = parse_event(
        envelope(
            "StepCompleted",
            {"stepPath": "a", "attempt": 2, "outputRef": "artifact://art_1", "artifactRefs": []},
        )
    )
    payload = PAYLOAD_MODELS["StepCompleted"].model_validate(parsed.payload)
    assert (payload.step_path, payload.attempt, payload.output_ref) == (  # type: ignore[attr-defined]
        "a",
        2,
        "artifact://art_1",
    )
    built = PAYLOAD_MODELS["StepScheduled"](step_path="x", step_id="x", uses="tool.call")
    assert built.to_json() == {"stepPath": "x", "stepId": "x", "uses": "tool.call"}


def test_presence_is_kept_null_output_differs_from_no_output() -> None:
    with_null = parse_event(envelope("StepCompleted", {"stepPath": "a", "output": None}))
    without = parse_event(envelope("StepCompleted", {"stepPath": "a"}))
    assert with_null.to_json()["payload"] == {"stepPath": "a", "output": None}
    assert without.to_json()["payload"] == {"stepPath": "a"}


def test_unknown_payload_fields_are_kept() -> None:
    payload = {"stepPath": "a", "futureField": {"x": [1]}, "uses": "tool.call"}
    assert parse_event(envelope("StepScheduled", payload)).to_json()["payload"] == payload


def test_validation_is_strict() -> None:
    for bad in (
        envelope("StepScheduled", {"stepPath": "a"}, sequence="1"),
        envelope("StepScheduled", {"stepPath": "a"}, sequence=0),
        envelope("StepScheduled", {"stepPath": "a"}, unknownEnvelopeField=1),
        envelope("StepAttemptStarted", {"stepPath": "a", "attempt": "1"}),
        envelope("StepScheduled", {"stepPath": ""}),
        envelope("harness.model.responded", {"turn": 0, "response": {"usage": USAGE}}),
        envelope("harness.session.started", {**MINIMAL["harness.session.started"], "role": "x"}),
    ):
        with pytest.raises(EventValidationError):
            parse_event(bad)


def test_error_messages_name_the_type_and_field() -> None:
    with pytest.raises(EventValidationError) as caught:
        parse_event(envelope("StepScheduled", {"stepPath": 3}))
    assert "StepScheduled" in str(caught.value)
    assert "stepPath" in str(caught.value)
    assert caught.value.errors


def test_tool_call_turn_follows_the_caller() -> None:
    model_call = {"callId": "c", "caller": "model", "toolName": "t", "args": {}}
    with pytest.raises(EventValidationError, match="turn is required"):
        parse_event(envelope("harness.tool_call.started", model_call))
    assert parse_event(envelope("harness.tool_call.started", {**model_call, "turn": 2}))
    code_call = {**model_call, "caller": "code", "turn": 1}
    with pytest.raises(EventValidationError, match="turn must be absent"):
        parse_event(envelope("harness.tool_call.started", code_call))


@pytest.mark.parametrize(("legacy", "current"), sorted(LEGACY_HARNESS_EVENT_TYPES.items()))
def test_legacy_harness_names_are_read_as_current_ones(legacy: str, current: str) -> None:
    assert normalize_event_type(legacy) == current
    parsed = parse_event(envelope(legacy, MINIMAL[current]))
    assert type(parsed) is EVENT_CLASSES[current]
    assert parsed.type == current
    assert parsed.to_json()["type"] == current


def test_engine_events_are_carried_untyped() -> None:
    data = envelope("little.lease.acquired", {"key": "k", "token": 3, "anything": [None]})
    parsed = parse_event(data)
    assert isinstance(parsed, EngineEvent)
    assert parsed.to_json() == data
    assert is_engine_event_type("little.dispatch.sent")
    assert not is_engine_event_type("little.")
    assert not is_engine_event_type("littlex.y")


@pytest.mark.parametrize("event_type", ["Bogus", "little.", "runStarted", "harness.model", ""])
def test_unknown_types_are_refused_clearly(event_type: str) -> None:
    with pytest.raises(UnknownEventTypeError, match="Unknown event type"):
        parse_event(envelope(event_type, {}))


def test_the_adapter_itself_refuses_unknown_types() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as caught:
        EVENT_ADAPTER.validate_python(envelope("Bogus", {}))
    assert caught.value.errors()[0]["type"] == "unknown_event_type"
    assert (
        type(EVENT_ADAPTER.validate_python(envelope("RunStarted", {})))
        is EVENT_CLASSES["RunStarted"]
    )


def test_parse_event_refuses_non_objects() -> None:
    with pytest.raises(EventValidationError, match="must be an object"):
        parse_event([])  # type: ignore[arg-type]


def test_event_input_validates_what_writers_append() -> None:
    made = event_input("StepCompleted", {"stepPath": "a", "output": None}, occurrence_id="o")
    assert made == EventInput(
        type="StepCompleted", payload={"stepPath": "a", "output": None}, occurrence_id="o"
    )
    model = PAYLOAD_MODELS["StepScheduled"](step_path="a")
    assert event_input("StepScheduled", model).payload == {"stepPath": "a"}
    assert event_input("HarnessSessionFailed", MINIMAL["harness.session.failed"]).type == (
        "harness.session.failed"
    )
    assert event_input("little.dispatch.sent", {"queue": "q"}).payload == {"queue": "q"}
    with pytest.raises(EventValidationError):
        event_input("StepCompleted", {"output": 1})
    with pytest.raises(EventValidationError, match="not the payload model"):
        event_input("StepCompleted", model)
    with pytest.raises(UnknownEventTypeError):
        validate_payload("Nope", {})


def test_event_catalogue_imports_no_io_libraries() -> None:
    code = (
        "import sys, little_dist.event_types, little_dist.events;"
        "bad = [m for m in ('redis', 'boto3', 'litellm', 'celery', 'sqlite3') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_only_attempt_traces_keep_the_scheduler_asleep() -> None:
    from little_dist.events import wakes_scheduler

    assert not wakes_scheduler(["StepAttemptStarted", "harness.tool_call.started"])
    assert not wakes_scheduler(["HarnessModelCalled", "little.harness.model.memoized"])
    # Whoever appends a schedule sends its tasks (the sweep covers one that died first).
    assert not wakes_scheduler(["StepScheduled", "ParallelBranchScheduled"])
    assert wakes_scheduler(["harness.tool_call.succeeded", "StepCompleted"])
    assert wakes_scheduler(["StepFailed"])
    assert wakes_scheduler(["little.run.cancel_requested"])
    assert wakes_scheduler(["SomethingNew"])
    assert wakes_scheduler(["StepScheduled", "RunCompleted"])
    assert wakes_scheduler(["RunStarted"])
    assert not wakes_scheduler([])


_PAYLOADS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    sequence=st.integers(min_value=1, max_value=2**53),
    event_type=st.sampled_from(["RunStarted", "StepCompleted", "harness.tool_call.succeeded"]),
    occurrence_id=st.none() | st.text(min_size=1, max_size=8),
    payload=st.dictionaries(st.text(max_size=6), _PAYLOADS, max_size=4),
)
def test_a_recorded_event_is_the_event_validation_builds(
    sequence: int, event_type: str, occurrence_id: str | None, payload: dict[str, Any]
) -> None:
    fields = (
        "evt_0123456789abcdef",
        "run_x",
        sequence,
        event_type,
        occurrence_id,
        "2026-01-01T00:00:00.000Z",
    )
    fast = recorded_event(*fields, dict(payload))
    checked = Event(
        event_id=fields[0],
        run_id=fields[1],
        sequence=sequence,
        type=event_type,
        occurrence_id=occurrence_id,
        recorded_at=fields[5],
        payload=dict(payload),
    )
    assert fast == checked
    assert fast.to_json() == checked.to_json()
    assert fast.model_dump_json() == checked.model_dump_json()
    assert Event.model_validate(fast.to_json()) == fast
    with pytest.raises(ValidationError):
        fast.sequence = 2  # type: ignore[misc]  # frozen, like any Event
    # A copy with a field changed, as of a validated event (each has its own fields set).
    assert fast.model_copy(update={"run_id": "run_y"}) == checked.model_copy(
        update={"run_id": "run_y"}
    )
    assert fast.model_fields_set == checked.model_fields_set
