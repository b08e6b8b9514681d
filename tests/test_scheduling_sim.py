"""A tiny in-test run loop for ``decide``: fold, decide, append, play workers, repeat.

Workers are simulated by appending ``StepAttemptStarted`` and ``StepCompleted``/``StepFailed``
with the occurrence ids the runtime uses. ``Sim.run`` plays dispatched attempts in the order
a chooser picks (first-come by default), so tests can shuffle completion orders.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from little_dist.compiler import compile_lwir
from little_dist.events import Event, EventInput
from little_dist.run_state import RunState, RunStateBuilder
from little_dist.scheduling import Decision, RunContext, StepDispatch, decide
from little_dist.step_context import resolve_step_input
from little_dist.world.in_process import MemoryWorld
from tests.lwir_builder import workflow_doc

Outcome = tuple[str, Any]  # ("ok", output) | ("fail", error) | ("hold", None)
Worker = Callable[["Sim", StepDispatch, Any], Outcome]


def lwir_doc(
    steps: list[dict[str, Any]], *, output_schema: Any = True, **extra: Any
) -> dict[str, Any]:
    """A valid LWIR around ``steps`` (tools allowed: every ``with.tool`` used)."""
    return workflow_doc("sched-test", steps, output_schema=output_schema, **extra)


#: The fan-in envelope schema a parallel step's array output must declare.
ENVELOPE: dict[str, Any] = {
    "type": "object",
    "required": ["itemKey", "status", "artifacts"],
    "properties": {
        "itemKey": {"type": "string"},
        "status": {"type": "string"},
        "output": {},
        "outputRef": {"type": "string"},
        "error": {"type": "object"},
        "artifacts": {"type": "array", "items": {"type": "string"}},
    },
}
FAN_IN_OUTPUT: dict[str, Any] = {"mode": "array", "schema": {"type": "array", "items": ENVELOPE}}


def parallel(
    step_id: str,
    children: list[dict[str, Any]],
    *,
    items: str = "{{ input.items }}",
    item_key: str = "{{ item.id }}",
    max_branches: int = 100,
    max_concurrency: int = 3,
    failure_mode: str = "all_settled",
    order: str = "input",
    output_step: str | None = None,
    needs: list[str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    fan_in: dict[str, Any] = {"order": order, "output": "array"}
    if output_step is not None:
        fan_in["outputStep"] = output_step
    step: dict[str, Any] = {
        "id": step_id,
        "uses": "parallel",
        "with": {
            "items": items,
            "cardinality": {"kind": "matches_items"},
            "itemKey": item_key,
            "maxBranches": max_branches,
            "maxConcurrency": max_concurrency,
            "failureMode": failure_mode,
            "fanIn": fan_in,
        },
        "steps": children,
        "output": FAN_IN_OUTPUT,
    }
    if needs:
        step["needs"] = needs
    step.update(extra)
    return step


def tool(step_id: str, *, needs: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    step: dict[str, Any] = {
        "id": step_id,
        "uses": "tool.call",
        "with": {"tool": extra.pop("tool_name", "t")},
        "output": extra.pop("output", {"mode": "json", "schema": {}}),
    }
    if needs:
        step["needs"] = needs
    step.update(extra)
    return step


def echo_worker(sim: Sim, dispatch: StepDispatch, step_input: Any) -> Outcome:
    return ("ok", {"path": dispatch.step_path, "input": step_input})


@dataclass
class Sim:
    lwir: dict[str, Any]
    run_input: Any = field(default_factory=dict)
    run_id: str = "run_sim"
    ctx_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.version = compile_lwir(self.lwir, input=self.run_input)
        self.world = MemoryWorld()
        self.ctx = RunContext(self.version, self.run_input, self.run_id, **self.ctx_options)
        self.builder = RunStateBuilder(self.run_id)
        self.decisions: list[Decision] = []
        self.dispatched: list[StepDispatch] = []
        self.outstanding: dict[tuple[str, int], StepDispatch] = {}
        self.running: dict[tuple[str, int], StepDispatch] = {}
        self.append(
            [
                EventInput(
                    type="WorkflowVersionRegistered",
                    payload={
                        "workflowVersionId": self.version.id,
                        "workflowVersionHash": self.version.hash,
                    },
                    occurrence_id="registered",
                ),
                EventInput(
                    type="RunStarted",
                    payload={"workflowVersionId": self.version.id, "input": self.run_input},
                    occurrence_id="run-start",
                ),
            ]
        )

    # -- world ---------------------------------------------------------------------------
    def append(self, events: list[EventInput]) -> list[Event]:
        before = self.world.last_sequence(self.run_id)
        recorded = self.world.append_batch(self.run_id, events)
        self.builder.apply_all(self.world.list_events(self.run_id, after=before))
        return recorded

    @property
    def state(self) -> RunState:
        return self.builder.snapshot()

    def events(self) -> list[Event]:
        return self.world.list_events(self.run_id)

    def types(self, event_type: str) -> list[dict[str, Any]]:
        return [e.payload for e in self.events() if e.type == event_type]

    # -- the loop ------------------------------------------------------------------------
    def decide(self) -> Decision:
        decision = decide(self.ctx, self.state)
        self.decisions.append(decision)
        self.append(list(decision.events))
        for dispatch in decision.dispatch:
            key = (dispatch.step_path, dispatch.attempt)
            if key not in self.outstanding and key not in self.running:
                self.outstanding[key] = dispatch
                self.dispatched.append(dispatch)
        return decision

    def start(self, dispatch: StepDispatch) -> None:
        key = (dispatch.step_path, dispatch.attempt)
        self.outstanding.pop(key, None)
        self.running[key] = dispatch
        self.append(
            [
                EventInput(
                    type="StepAttemptStarted",
                    payload={
                        "stepPath": dispatch.step_path,
                        "stepId": dispatch.step_id,
                        "attempt": dispatch.attempt,
                        "attemptId": f"attempt_{dispatch.attempt}",
                    },
                    occurrence_id=f"start:{dispatch.step_path}:{dispatch.attempt}",
                )
            ]
        )

    def finish(self, dispatch: StepDispatch, outcome: Outcome) -> None:
        key = (dispatch.step_path, dispatch.attempt)
        self.running.pop(key, None)
        kind, value = outcome
        base = {
            "stepPath": dispatch.step_path,
            "stepId": dispatch.step_id,
            "attempt": dispatch.attempt,
        }
        if kind == "ok":
            event = EventInput(
                type="StepCompleted",
                payload={**base, "output": value, "metadata": {"uses": "tool.call"}},
                occurrence_id=f"end:{dispatch.step_path}:{dispatch.attempt}",
            )
        else:
            event = EventInput(
                type="StepFailed",
                payload={**base, "attemptId": f"attempt_{dispatch.attempt}", "error": value},
                occurrence_id=f"end:{dispatch.step_path}:{dispatch.attempt}",
            )
        self.append([event])

    def step_input(self, dispatch: StepDispatch) -> Any:
        return resolve_step_input(self.ctx, self.state, dispatch.step_path)

    def run(
        self,
        worker: Worker = echo_worker,
        *,
        choose: Callable[[list[StepDispatch]], int] | None = None,
        max_rounds: int = 10_000,
        on_round: Callable[[Sim], None] | None = None,
    ) -> RunState:
        """Decide and play one dispatched attempt per round until the run is done."""
        for _ in range(max_rounds):
            decision = self.decide()
            if on_round is not None:
                on_round(self)
            if decision.done:
                return self.state
            ready = list(self.outstanding.values())
            if not ready:
                raise AssertionError(f"stuck: nothing to dispatch; state {self.state!r}")
            dispatch = ready[choose(ready) if choose is not None else 0]
            self.start(dispatch)
            step_input = self.step_input(dispatch)
            outcome = worker(self, dispatch, step_input)
            self.finish(dispatch, outcome)
        raise AssertionError("run did not finish")
