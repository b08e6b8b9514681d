"""Capability drift: a resumed step whose tools, models or skills changed fails with cause
``capability_drift`` and an event naming what changed; an unchanged one resumes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from little_dist.compiler import compile_lwir
from little_dist.event_types import parse_event
from little_dist.events import Event
from little_dist.harness.drift import (
    CapabilityDriftError,
    changed_sections,
    check_manifest_drift,
    manifest_diff,
)
from little_dist.local_runner import run_version
from little_dist.run_state import materialize_run_state
from little_dist.runtime import Capabilities
from little_dist.testing import ScriptedModel, ToolCall
from little_dist.tools import Tool, ToolRegistry
from little_dist.world.local import LocalWorld

RUN = "run_drift"
#: Long enough that a loaded machine does not lose the runner lease before the crash.
LEASE_TTL = 2.0


class Crash(BaseException):
    """The process dies (not an Exception: nothing in the engine may swallow it)."""


@pytest.fixture
def world(tmp_path: Path) -> Iterator[LocalWorld]:
    made = LocalWorld(tmp_path / "world")
    try:
        yield made
    finally:
        made.close()


def lookup_tool(description: str = "Look a key up.", *, extra: bool = False) -> Tool:
    properties: dict[str, Any] = {"key": {"type": "string"}}
    if extra:
        properties["limit"] = {"type": "integer"}
    return Tool.from_json_schema(
        "lookup",
        {"type": "object", "required": ["key"], "properties": properties},
        lambda key, limit=None: {"value": f"v-{key}"},
        description=description,
    )


def lwir() -> dict[str, Any]:
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "tests.drift"},
        "input": {"schema": {"type": "object"}},
        "output": {"schema": {"type": "string"}},
        "permissions": {"models": ["model.fast"], "tools": ["lookup"]},
        "steps": [
            {
                "id": "answer",
                "uses": "ai.generate",
                "with": {"model": "model.fast", "prompt": "Look up k and answer."},
                "output": {"mode": "text"},
            }
        ],
    }


def caps(tool: Tool, model: str = "scripted/demo") -> Capabilities:
    registry = ToolRegistry()
    registry.register(tool)
    return Capabilities(tools=registry, models={"model.fast": model})


def crash_after_the_model_turn(
    world: LocalWorld, scripted: ScriptedModel, capabilities: Capabilities | None = None
) -> None:
    """Run until the first model turn (asking for ``lookup``) is recorded, then 'die' at the
    next append (the tool call's start), leaving the attempt running."""
    scripted.on(step="answer").call_tools(
        [ToolCall("lookup", {"key": "k"}, id="c1")]
    ).then_reply_text("the answer")
    version = compile_lwir(lwir(), input={})
    original = world.append_batch

    def dies_at_the_tool_call(run_id: str, events: Any, **kwargs: Any) -> Any:
        if any(e.type == "harness.tool_call.started" for e in events):
            raise Crash()
        return original(run_id, events, **kwargs)

    world.append_batch = dies_at_the_tool_call  # type: ignore[method-assign]
    try:
        with pytest.raises(Crash):
            run_version(
                world,
                version,
                {},
                run_id=RUN,
                capabilities=capabilities or caps(lookup_tool()),
                lease_ttl=LEASE_TTL,
            )
    finally:
        world.append_batch = original  # type: ignore[method-assign]
    types = [e.type for e in world.list_events(RUN)]
    assert "harness.model.responded" in types and "StepCompleted" not in types


def resume(world: LocalWorld, capabilities: Capabilities) -> Any:
    version = compile_lwir(lwir(), input={})
    return run_version(
        world, version, {}, run_id=RUN, capabilities=capabilities, lease_ttl=LEASE_TTL
    )


def of_type(events: list[Event], kind: str) -> list[Event]:
    return [event for event in events if event.type == kind]


def test_a_changed_tool_description_fails_the_resumed_step_with_capability_drift(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    crash_after_the_model_turn(world, scripted_model)
    calls_before = len(scripted_model.calls)

    state = resume(world, caps(lookup_tool("Look a key up, now in the archive too.")))

    assert state.status == "failed"
    events = world.list_events(RUN)
    failures = [e for e in of_type(events, "StepFailed") if e.payload["attempt"] == 2]
    (failed,) = failures
    assert failed.payload["error"]["causeCode"] == "capability_drift"
    assert failed.payload["error"]["retriable"] is False
    assert "allowedToolsHash" in failed.payload["error"]["message"]
    (drift,) = of_type(events, "little.harness.capability_drift")
    assert drift.payload["stepPath"] == "answer" and drift.payload["attempt"] == 2
    assert [change["section"] for change in drift.payload["changes"]] == ["allowedToolsHash"]
    assert drift.payload["diff"][0].startswith("$.allowedToolsHash: ")
    (started,) = of_type(events, "harness.session.started")  # only attempt 1's
    assert drift.payload["recordedManifestHash"] == started.payload["manifestHash"]
    assert drift.payload["manifestHash"] != started.payload["manifestHash"]
    # The model was not called again with the other tool.
    assert len(scripted_model.calls) == calls_before
    # The log reads back typed (the drift event under the engine prefix) and folds.
    for event in events:
        parse_event(event.model_dump(by_alias=True))
    assert (
        materialize_run_state(events).steps["answer"].attempts[-1].error
        == (failed.payload["error"])
    )


def test_a_changed_tool_schema_or_model_is_drift_too(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    crash_after_the_model_turn(world, scripted_model)

    state = resume(world, caps(lookup_tool(extra=True), model="scripted/other"))

    assert state.status == "failed"
    (drift,) = of_type(world.list_events(RUN), "little.harness.capability_drift")
    sections = [change["section"] for change in drift.payload["changes"]]
    assert sections == ["allowedToolsHash", "modelHash"]


def test_nothing_changed_resumes_and_replays_the_recorded_turn(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    crash_after_the_model_turn(world, scripted_model)
    calls_before = len(scripted_model.calls)

    state = resume(world, caps(lookup_tool()))

    assert state.status == "completed", state.error
    events = world.list_events(RUN)
    assert not of_type(events, "little.harness.capability_drift")
    assert len(of_type(events, "little.harness.model.memoized")) == 1
    assert len(scripted_model.calls) == calls_before + 1  # only the second turn is live


def test_manifest_diff_is_upstreams_line_format() -> None:
    recorded = {"allowedToolsHash": "sha256:a", "skillsHash": "sha256:s", "memoryStoreIds": []}
    current = {"allowedToolsHash": "sha256:b", "skillsHash": "sha256:s", "mcp": {"x": 1}}
    assert manifest_diff(recorded, current) == [
        '$.allowedToolsHash: "sha256:a" -> "sha256:b"',
        "$.mcp.x: undefined -> 1",
        "$.memoryStoreIds: [] -> undefined",
    ]
    assert [c["section"] for c in changed_sections(recorded, current)] == [
        "allowedToolsHash",
        "mcp",
        "memoryStoreIds",
    ]
    check_manifest_drift(recorded, None, dict(recorded), where="run r step s")
    check_manifest_drift(None, None, current, where="run r step s")
    with pytest.raises(CapabilityDriftError) as caught:
        check_manifest_drift(recorded, None, current, where="run r step s")
    assert caught.value.cause_code == "capability_drift"
    assert "allowedToolsHash, mcp, memoryStoreIds" in str(caught.value)


def test_other_memory_mounts_are_drift_too(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    from dataclasses import replace

    from little_dist.memory.layout import MemoryMountSpec
    from little_dist.sandbox.bash_capabilities import BashCapabilities

    def with_memory(mode: Any) -> Capabilities:
        spec = MemoryMountSpec("workflow:tests.drift", "/mnt/memory/workflow/", mode)
        return replace(caps(lookup_tool()), bash=BashCapabilities(), memory_mounts=(spec,))

    crash_after_the_model_turn(world, scripted_model, with_memory("rw"))

    state = resume(world, with_memory("ro"))

    assert state.status == "failed"
    (started,) = of_type(world.list_events(RUN), "harness.session.started")
    assert started.payload["manifest"]["memoryStoreIds"] == ["workflow:tests.drift"]
    (drift,) = of_type(world.list_events(RUN), "little.harness.capability_drift")
    assert [change["section"] for change in drift.payload["changes"]] == ["memoryMountsHash"]


def test_a_step_with_no_model_records_the_model_hash_a_resolved_none_slot_has() -> None:
    """Steps without a model share one model value (its hash computed once); the manifest
    records the hash a freshly made ``none`` slot has, as before, so a run recorded by an
    older worker resumes without drift."""
    from little_dist.harness.registry import _digest_of_model, _model_digest
    from little_dist.harness.types import NO_MODEL, ResolvedModel

    fresh = ResolvedModel(slot_id="none", litellm_model="none")
    assert _model_digest(NO_MODEL) == _digest_of_model(fresh)
    assert _model_digest(fresh) == _digest_of_model(fresh)
    assert _model_digest(None) == _digest_of_model(None) != _model_digest(NO_MODEL)
