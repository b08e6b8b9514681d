"""A parallel step's ``failureMode`` end to end: the in-process runner on a real LocalWorld.

Five branches ``a``..``e``, at most two in flight. Branch ``a``'s tool fails for good (its
error is not retriable, so the branch's ``retry.maxAttempts: 3`` buys nothing); branch ``b``
is still running when that failure is recorded -- its tool waits until the log shows
``ParallelBranchFailed`` for ``fan[a]`` -- and then succeeds.

- ``fail_fast``: no branch starts after the failure, ``b`` finishes and is recorded, then
  ``ParallelGroupFailed`` and the parallel step's ``StepFailed``, and the run fails with the
  tool's error.
- ``all_settled``: every branch runs; the step completes with a fan-in envelope that mixes
  ``failed`` and ``completed`` entries, in input order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from little_dist.compiler import compile_lwir
from little_dist.events import Event
from little_dist.local_runner import run_version
from little_dist.report import build_run_report
from little_dist.run_state import RunState
from little_dist.runtime import Capabilities
from little_dist.tools import ToolRegistry, tool
from little_dist.world.local import LocalWorld
from tests.workflows_for_tests import API_VERSION, FAN_IN_SCHEMA, tool_step

RUN = "run_parallel_e2e"
KEYS = ["a", "b", "c", "d", "e"]
FAILING, IN_FLIGHT = "a", "b"
MESSAGE = "a is rejected"


class Rejected(Exception):
    """A tool error that trying again cannot fix."""

    retriable = False


class Probe:
    """The branches' tool: counts real calls; ``a`` fails, ``b`` outlives ``a``'s failure."""

    def __init__(self, world: LocalWorld) -> None:
        self.world = world
        self.calls: list[str] = []
        self.saw_failure: dict[str, bool] = {}
        self._lock = threading.Lock()

    def _branch_failure_recorded(self) -> bool:
        return any(
            event.type == "ParallelBranchFailed"
            and event.payload.get("branchPath") == f"fan[{FAILING}]"
            for event in self.world.list_events(RUN)
        )

    def _in_flight_called(self) -> bool:
        with self._lock:
            return IN_FLIGHT in self.calls

    def registry(self) -> ToolRegistry:
        def probe(key: str) -> dict[str, Any]:
            """Answer for one branch."""
            with self._lock:
                self.calls.append(key)
            if key == FAILING:
                # Fail only once the other branch is in its tool call (its attempt is
                # recorded as started by then): else, on a loaded machine, its thread may
                # start only after this failure, and nothing would be in flight.
                deadline = time.monotonic() + 15
                while not self._in_flight_called() and time.monotonic() < deadline:
                    time.sleep(0.005)
                raise Rejected(MESSAGE)
            if key == IN_FLIGHT:
                # Stay in flight until the runner has recorded the other branch's failure.
                deadline = time.monotonic() + 15
                while not self._branch_failure_recorded() and time.monotonic() < deadline:
                    time.sleep(0.01)
                self.saw_failure[key] = self._branch_failure_recorded()
            return {"key": key}

        return ToolRegistry([tool(probe)])


def fan_lwir(failure_mode: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Workflow",
        "metadata": {"name": f"tests.parallel-{failure_mode}"},
        "input": {
            "schema": {
                "type": "object",
                "required": ["keys"],
                "properties": {"keys": {"type": "array", "items": {"type": "string"}}},
            }
        },
        "output": {"schema": {"type": "array"}},
        "permissions": {"models": [], "tools": ["probe"], "secrets": [], "network": []},
        "steps": [
            {
                "id": "fan",
                "uses": "parallel",
                "with": {
                    "items": "{{ input.keys }}",
                    "itemKey": "{{ item }}",
                    "cardinality": {"kind": "matches_items"},
                    "maxBranches": 10,
                    "maxConcurrency": 2,
                    "failureMode": failure_mode,
                    "fanIn": {"order": "input", "output": "array"},
                },
                "output": {"mode": "array", "schema": FAN_IN_SCHEMA},
                "steps": [
                    tool_step("work", "probe", {"key": "{{ item }}"}, retry={"maxAttempts": 3})
                ],
            }
        ],
    }


@pytest.fixture
def world(tmp_path: Path) -> Iterator[LocalWorld]:
    opened = LocalWorld(tmp_path / "world")
    yield opened
    opened.close()


def run(world: LocalWorld, failure_mode: str) -> tuple[RunState, Probe, list[Event]]:
    probe = Probe(world)
    run_input = {"keys": KEYS}
    version = compile_lwir(fan_lwir(failure_mode), input=run_input)
    state = run_version(
        world,
        version,
        run_input,
        run_id=RUN,
        capabilities=Capabilities(tools=probe.registry()),
        max_workers=4,
    )
    return state, probe, world.list_events(RUN)


def seq(events: list[Event], type_: str, **payload: Any) -> list[int]:
    """Sequences of the events of ``type_`` whose payload has every given key/value."""
    return [
        event.sequence
        for event in events
        if event.type == type_ and all(event.payload.get(k) == v for k, v in payload.items())
    ]


def one(events: list[Event], type_: str, **payload: Any) -> int:
    found = seq(events, type_, **payload)
    assert len(found) == 1, (type_, payload, found)
    return found[0]


def branch_scheduled(events: list[Event]) -> list[str]:
    return [e.payload["branchPath"] for e in events if e.type == "ParallelBranchScheduled"]


def assert_rejected(error: Any) -> None:
    assert isinstance(error, dict), error
    assert MESSAGE in error["message"]
    assert error["causeCode"] == "tool_error"
    assert error["retriable"] is False


def test_fail_fast_stops_new_branches_and_fails_the_run(world: LocalWorld) -> None:
    state, probe, events = run(world, "fail_fast")

    # The run fails with the tool's own error, and says so in one readable envelope.
    assert state.status == "failed"
    assert_rejected(state.error)
    run_failed = one(events, "RunFailed")
    assert run_failed == events[-1].sequence
    assert_rejected(events[-1].payload["error"])

    # The failing branch ran once: its error is not retriable, whatever maxAttempts says.
    assert len(seq(events, "StepAttemptStarted", stepPath="fan[a].work")) == 1
    branch_failed = one(events, "ParallelBranchFailed", branchPath="fan[a]")
    assert_rejected(events[branch_failed - 1].payload["error"])

    # No branch started after the failure: only the two that were already in flight ran.
    assert branch_scheduled(events) == ["fan[a]", "fan[b]"]
    assert max(seq(events, "ParallelBranchScheduled")) < branch_failed
    assert sorted(probe.calls) == ["a", "b"]
    for key in "cde":
        assert not seq(events, "StepScheduled", stepPath=f"fan[{key}].work")
        assert f"fan[{key}].work" not in state.steps

    # The branch in flight at the failure finished, and its end was recorded.
    assert probe.saw_failure == {"b": True}
    b_started = one(events, "StepAttemptStarted", stepPath="fan[b].work")
    b_completed = one(events, "StepCompleted", stepPath="fan[b].work")
    b_branch_done = one(events, "ParallelBranchCompleted", branchPath="fan[b]")
    assert b_started < branch_failed < b_completed < b_branch_done
    assert state.steps["fan[b].work"].status == "completed"
    assert state.steps["fan[b].work"].output == {"key": "b"}

    # Only then does the group fail, then the parallel step, then the run.
    group_failed = one(events, "ParallelGroupFailed", stepPath="fan")
    step_failed = one(events, "StepFailed", stepPath="fan")
    assert b_branch_done < group_failed < step_failed < run_failed
    assert_rejected(events[group_failed - 1].payload["error"])
    assert_rejected(events[step_failed - 1].payload["error"])
    assert not seq(events, "ParallelGroupCompleted")
    assert state.steps["fan"].status == "failed"
    assert_rejected(state.steps["fan"].error)

    group = state.parallel_groups["fan"]
    assert group.status == "failed" and group.failure_mode == "fail_fast"
    assert {path: b.status for path, b in group.branches.items()} == {
        "fan[a]": "failed",
        "fan[b]": "completed",
    }
    # The report shows the same story.
    rows = {row.step_path: row.status for row in build_run_report(events).steps}
    assert rows == {"fan": "failed", "fan[a].work": "failed", "fan[b].work": "completed"}


def test_all_settled_runs_every_branch_and_fans_in_a_mixed_envelope(world: LocalWorld) -> None:
    state, probe, events = run(world, "all_settled")

    assert state.status == "completed", state.error
    assert sorted(probe.calls) == KEYS
    assert probe.saw_failure == {"b": True}
    # Branches kept starting after the failure, up to the last one.
    branch_failed = one(events, "ParallelBranchFailed", branchPath="fan[a]")
    assert branch_scheduled(events) == [f"fan[{key}]" for key in KEYS]
    assert max(seq(events, "ParallelBranchScheduled")) > branch_failed
    assert len(seq(events, "StepAttemptStarted", stepPath="fan[a].work")) == 1

    assert not seq(events, "ParallelGroupFailed")
    group_completed = one(events, "ParallelGroupCompleted", stepPath="fan")
    step_completed = one(events, "StepCompleted", stepPath="fan")
    assert group_completed < step_completed < one(events, "RunCompleted")
    assert state.parallel_groups["fan"].status == "completed"

    # The fan-in envelope: one entry per item, in input order, failures included.
    envelope = state.steps["fan"].output
    assert state.output == envelope
    assert [entry["itemKey"] for entry in envelope] == KEYS
    assert [entry["status"] for entry in envelope] == ["failed"] + ["completed"] * 4
    failed = envelope[0]
    assert_rejected(failed["error"])
    assert "output" not in failed and failed["artifacts"] == []
    for key, entry in zip(KEYS[1:], envelope[1:], strict=True):
        assert entry["output"] == {"key": key}
        assert entry["outputRef"].startswith("artifact://")
        assert entry["artifacts"] == [entry["outputRef"]]
        assert "error" not in entry


def test_fail_fast_through_run_workflow_raises_a_clear_error(world: LocalWorld) -> None:
    from little_dist import RunFailedError, define_workflow, run_workflow

    probe = Probe(world)
    plan = fan_lwir("fail_fast")
    workflow = define_workflow(
        id=plan["metadata"]["name"],
        model="scripted/fast",  # never called: the plan is fixed
        tools=list(probe.registry()),
        plan=plan,
        input=plan["input"]["schema"],
        output={"type": "array"},
    )
    with pytest.raises(RunFailedError) as caught:
        run_workflow(workflow, {"keys": KEYS}, world=world, run_id=RUN)

    failure = caught.value
    assert str(failure) == (
        f"Run '{RUN}' of workflow 'tests.parallel-fail_fast' failed (tool_error): "
        f"tool 'probe' failed: {MESSAGE}"
    )
    assert failure.cause_code == "tool_error"
    assert failure.failed_step_path == "fan[a].work"
    assert_rejected(failure.error)
    assert sorted(probe.calls) == ["a", "b"]
    assert failure.result is not None and failure.result.status == "failed"
