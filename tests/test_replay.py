from __future__ import annotations

from typing import Any

import pytest

from little_dist.events import Event
from little_dist.replay import (
    ReplayPlan,
    RunStateEventMismatchError,
    replay_run,
    replay_run_from_world,
)
from little_dist.world.base import (
    ArtifactManifest,
    ArtifactNotFoundError,
    ArtifactRead,
    RunNotFoundError,
)
from tests.conftest import load_vectors

VECTORS: list[dict[str, Any]] = load_vectors("run_state")
REPLAY_VECTORS = [v for v in VECTORS if "expected_replay" in v]
REF = "artifact://art_99f810bad81d47be"


def _manifest(ref: str, run_id: str) -> ArtifactManifest:
    return ArtifactManifest(
        artifact_id=ref.removeprefix("artifact://"),
        artifact_ref=ref,
        run_id=run_id,
        name="profile",
        content_type="application/json",
        encoding="json",
        sha256="sha256:" + "0" * 64,
        size_bytes=14,
        created_at="2026-01-01T00:00:00.000Z",
        step_path="extract",
    )


class FakeArtifacts:
    """An artifact reader over a dict; records what was read."""

    def __init__(self, payloads: dict[str, Any], run_id: str) -> None:
        self.payloads = payloads
        self.run_id = run_id
        self.reads: list[str] = []

    def __call__(self, ref: str, *, run_id: str | None = None) -> ArtifactRead:
        assert run_id in (None, self.run_id)  # World.get_artifact's run hint, if given
        self.reads.append(ref)
        if ref not in self.payloads:
            raise ArtifactNotFoundError(ref)
        return ArtifactRead(_manifest(ref, self.run_id), self.payloads[ref])


class FakeWorld:
    """Just the two World methods replay uses."""

    def __init__(self, events: dict[str, list[Event]], artifacts: FakeArtifacts) -> None:
        self.events = events
        self.get_artifact = artifacts

    def list_events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[Event]:
        return [e for e in self.events.get(run_id, []) if e.sequence > after]


def _event(run_id: str, sequence: int, type_: str, payload: dict[str, Any]) -> Event:
    return Event(
        event_id=f"evt_{sequence:016x}",
        run_id=run_id,
        sequence=sequence,
        type=type_,
        recorded_at=f"2026-01-01T00:00:0{sequence}.000Z",
        payload=payload,
    )


@pytest.mark.parametrize("vector", REPLAY_VECTORS, ids=[v["name"] for v in REPLAY_VECTORS])
def test_expected_replay(vector: dict[str, Any]) -> None:
    plan = replay_run(vector["events"], run_id=vector["runId"])
    data = plan.to_json()
    for key, expected in vector["expected_replay"].items():
        assert data[key] == expected
    assert data["state"] == vector["expected_state"]
    asserted = vector["replay_asserted"]
    for key in ("completedStepPaths", "pendingStepPaths"):
        if key in asserted:
            assert data[key] == asserted[key]
    for step, expected in zip(data["steps"], asserted.get("steps_contain", []), strict=False):
        assert {k: step[k] for k in expected} == expected


def test_numeric_looking_paths_keep_log_order() -> None:
    vector = next(v for v in VECTORS if v["name"] == "replay_order_numeric_looking_step_paths")
    plan = replay_run(vector["events"])
    assert [s.step_path for s in plan.steps] == ["10", "2"]
    assert plan.pending_step_paths == ("10", "2")


def test_empty_log_is_run_not_found() -> None:
    vector = next(v for v in VECTORS if v["name"] == "empty_event_list")
    with pytest.raises(RunNotFoundError) as caught:
        replay_run([], run_id=vector["runId"])
    assert str(caught.value) == vector["replay_error"]["message"]
    assert caught.value.run_id == "run_missing"


def test_foreign_events_are_refused() -> None:
    vector = next(v for v in VECTORS if v["name"] == "rejects_events_from_another_run")
    with pytest.raises(RunStateEventMismatchError, match="Event runId mismatch"):
        replay_run(vector["events"], run_id=vector["runId"])


def test_artifacts_are_hydrated_in_run_order() -> None:
    vector = next(v for v in VECTORS if v["name"] == "replay_rebuilds_full_state")
    reader = FakeArtifacts({REF: {"name": "Ada"}}, vector["runId"])
    plan = replay_run(vector["events"], read_artifact=reader)
    assert [(a.ref, a.payload) for a in plan.artifacts] == [(REF, {"name": "Ada"})]
    assert plan.artifacts[0].manifest.run_id == vector["runId"]
    assert reader.reads == [REF]
    step = plan.steps[0]
    assert step.output == {"name": "Ada"} and not step.output_rehydrated


def test_output_ref_only_is_rehydrated_from_the_artifact() -> None:
    run_id = "run_ref_only"
    events = [
        _event(run_id, 1, "RunStarted", {}),
        _event(run_id, 2, "StepCompleted", {"stepPath": "extract", "outputRef": REF}),
        _event(run_id, 3, "StepCompleted", {"stepPath": "other", "output": None}),
    ]
    reader = FakeArtifacts({REF: {"name": "Ada"}}, run_id)
    plan = replay_run(events, read_artifact=reader)
    extract, other = plan.steps
    assert extract.has_output and extract.output == {"name": "Ada"} and extract.output_rehydrated
    assert extract.to_json() == {
        "stepPath": "extract",
        "status": "completed",
        "shouldRun": False,
        "artifactRefs": [REF],
        "output": {"name": "Ada"},
        "outputRef": REF,
    }
    assert other.to_json()["output"] is None and not other.output_rehydrated
    # Without a reader the ref stays a ref: nothing is read, nothing is invented.
    bare = replay_run(events)
    assert not bare.steps[0].has_output and "output" not in bare.steps[0].to_json()
    assert bare.artifacts == ()


def test_missing_or_foreign_artifacts_fail_replay() -> None:
    run_id = "run_bad_refs"
    events = [
        _event(run_id, 1, "RunStarted", {}),
        _event(run_id, 2, "ArtifactCreated", {"stepPath": "a", "artifactRef": REF}),
    ]
    with pytest.raises(ArtifactNotFoundError):
        replay_run(events, read_artifact=FakeArtifacts({}, run_id))
    with pytest.raises(ArtifactNotFoundError, match=REF):
        replay_run(events, read_artifact=FakeArtifacts({REF: 1}, "run_somebody_else"))


def test_replay_from_world() -> None:
    run_id = "run_world"
    events = [
        _event(run_id, 1, "RunStarted", {}),
        _event(run_id, 2, "StepScheduled", {"stepPath": "a"}),
        _event(run_id, 3, "StepCompleted", {"stepPath": "b", "outputRef": REF}),
    ]
    world = FakeWorld({run_id: events}, FakeArtifacts({REF: "text"}, run_id))
    plan = replay_run_from_world(world, run_id)  # type: ignore[arg-type]
    assert isinstance(plan, ReplayPlan)
    assert plan.pending_step_paths == ("a",) and plan.completed_step_paths == ("b",)
    assert plan.steps[1].output == "text"
    assert plan.events == tuple(events)
    with pytest.raises(RunNotFoundError, match="run_absent"):
        replay_run_from_world(world, "run_absent")  # type: ignore[arg-type]


def test_replay_is_deterministic() -> None:
    vector = REPLAY_VECTORS[0]
    assert replay_run(vector["events"]).to_json() == replay_run(vector["events"]).to_json()


def test_replay_from_memory_world_matches_the_vector() -> None:
    from little_dist.events import EventInput
    from little_dist.world.base import ArtifactInput
    from little_dist.world.in_process import MemoryWorld

    vector = next(v for v in VECTORS if v["name"] == "replay_plan_skips_completed_steps")
    run_id = vector["runId"]
    world = MemoryWorld()
    manifest = world.put_artifact(
        ArtifactInput(run_id=run_id, name="profile", payload={"name": "Ada"}, step_path="extract")
    )
    for event in vector["events"]:
        payload = dict(event["payload"])
        if "outputRef" in payload:
            payload["outputRef"] = manifest.artifact_ref
        world.append(run_id, EventInput(type=event["type"], payload=payload))
    plan = replay_run_from_world(world, run_id)
    assert plan.to_json()["pendingStepPaths"] == vector["expected_replay"]["pendingStepPaths"]
    assert plan.completed_step_paths == ("extract",)
    assert [(a.ref, a.payload) for a in plan.artifacts] == [
        (manifest.artifact_ref, {"name": "Ada"})
    ]
    with pytest.raises(RunNotFoundError):
        replay_run_from_world(world, "run_not_there")
