"""How fast is ``decide``? Calls per second on mid-run states, and whole runs.

- a 200-step chain with 100 steps completed (``decide`` replays the top scope);
- a 500-branch parallel step (engine cap 1000, ``maxConcurrency`` 50) with 250 branches
  settled and 50 in flight (``decide`` walks the group and drives the in-flight branches).

Also reports the whole-run cost: decide calls while playing every attempt to completion,
per step; and how decide's cost per event grows with a chain's length (10, 100 and 1,000
steps: flat when scheduling is linear in a run's length; ``bench/decide.py scaling`` prints
only that). Then a 1000-branch parallel step (``maxConcurrency`` 100), one attempt finished per
decide as in a live run, three ways: a fresh ``RunContext`` for every call (nothing cached
across calls), the context kept with ``memoize=False`` (only the branch list is cached: the
walk of every branch on every call), and the context kept with its parallel memo (the
default); the mid-run figure is a decide on the state with 500 branches settled and 100 in
flight. Run: ``.venv/bin/python bench/decide.py``.
"""

from __future__ import annotations

import gc
import sys
import time
from dataclasses import replace
from typing import Any

from little_dist.compiler import compile_lwir
from little_dist.run_state import RunState, RunStateBuilder
from little_dist.scheduling import RunContext, decide

ENVELOPE = {
    "type": "object",
    "required": ["itemKey", "status", "artifacts"],
    "properties": {"itemKey": {}, "status": {}, "output": {}, "artifacts": {}},
}


def _doc(steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "bench-decide"},
        "input": {"schema": {"type": "object"}},
        "output": {"schema": True},
        "permissions": {"tools": ["t"]},
        "steps": steps,
    }


def _tool(step_id: str, needs: list[str] | None = None) -> dict[str, Any]:
    step: dict[str, Any] = {
        "id": step_id,
        "uses": "tool.call",
        "with": {"tool": "t"},
        "output": {"mode": "json", "schema": {}},
    }
    if needs:
        step["needs"] = needs
    return step


class Runner:
    """Decide, append, and complete dispatched attempts, folding as it goes (no world)."""

    def __init__(self, ctx: RunContext, *, fresh_contexts: bool = False) -> None:
        self.ctx = ctx
        self.fresh_contexts = fresh_contexts  # a new context (empty caches) for every decide
        self.builder = RunStateBuilder(ctx.run_id)
        self.sequence = 0
        self.seen: set[str] = set()
        self.decides = 0
        self.add("RunStarted", {"workflowVersionId": ctx.version.id, "input": ctx.run_input})

    def add(self, event_type: str, payload: dict[str, Any], occurrence: str | None = None) -> None:
        if occurrence is not None:
            if occurrence in self.seen:
                return
            self.seen.add(occurrence)
        self.sequence += 1
        self.builder.apply(
            {
                "runId": self.ctx.run_id,
                "sequence": self.sequence,
                "type": event_type,
                "recordedAt": "2024-01-01T00:00:00.000Z",
                "payload": payload,
            }
        )

    @property
    def state(self) -> RunState:
        return self.builder.snapshot()

    def round(self, complete: int | None = None) -> bool:
        """One decide; then finish up to ``complete`` dispatched attempts (all by default)."""
        ctx = replace(self.ctx) if self.fresh_contexts else self.ctx
        decision = decide(ctx, self.state)
        self.decides += 1
        for event in decision.events:
            self.add(event.type, event.payload, event.occurrence_id)
        for dispatch in decision.dispatch[:complete]:
            base = {"stepPath": dispatch.step_path, "attempt": dispatch.attempt}
            self.add("StepAttemptStarted", base, f"start:{dispatch.step_path}:{dispatch.attempt}")
            self.add(
                "StepCompleted",
                {**base, "output": {"ok": dispatch.step_path}},
                f"end:{dispatch.step_path}:{dispatch.attempt}",
            )
        return decision.done


def chain_context(length: int = 200) -> RunContext:
    steps = [_tool("s0")] + [_tool(f"s{i}", [f"s{i - 1}"]) for i in range(1, length)]
    version = compile_lwir(_doc(steps))
    return RunContext(version, {}, "run_bench_chain")


def fan_context(branches: int = 500, concurrency: int = 50) -> RunContext:
    step = {
        "id": "p",
        "uses": "parallel",
        "with": {
            "items": "{{ input.items }}",
            "cardinality": {"kind": "matches_items"},
            "itemKey": "{{ item.id }}",
            "maxBranches": 100,
            "maxConcurrency": concurrency,
            "failureMode": "all_settled",
            "fanIn": {"order": "input", "output": "array"},
        },
        "steps": [_tool("work")],
        "output": {"mode": "array", "schema": {"type": "array", "items": ENVELOPE}},
    }
    version = compile_lwir(_doc([step]))
    run_input = {"items": [{"id": f"k{i}"} for i in range(branches)]}
    return RunContext(version, run_input, "run_bench_fan", max_branches_cap=1000)


def _rate(ctx: RunContext, state: RunState, seconds: float = 1.0, fresh: bool = False) -> float:
    calls = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        decide(replace(ctx) if fresh else ctx, state)
        calls += 1
    return calls / (time.perf_counter() - start)


def _settled(runner: Runner) -> int:
    group = runner.state.parallel_groups.get("p")
    return (
        0 if group is None else sum(1 for b in group.branches.values() if b.status != "scheduled")
    )


def _whole_run(runner: Runner, complete: int | None) -> tuple[float, int]:
    """Seconds to play ``runner``'s run to its end, and the steps it completed."""
    gc.collect()  # start each timed run with the same collector state
    start = time.perf_counter()
    while not runner.round(complete):
        pass
    elapsed = time.perf_counter() - start
    return elapsed, sum(1 for s in runner.state.steps.values() if s.status == "completed")


def wide_fan() -> None:
    """1000 branches, maxConcurrency 100: uncached (fresh context per call), memo off, cached."""
    runner = Runner(fan_context(1000, 100))
    while _settled(runner) < 500:
        runner.round(1)
    state, ctx = runner.state, runner.ctx
    rates = {
        "fresh ctx": _rate(ctx, state, fresh=True),
        "memo off": _rate(replace(ctx, memoize=False), state),
        "cached": _rate(ctx, state),
    }
    print("1000-branch parallel (maxConcurrency 100), 500 settled, 100 in flight, per decide:")
    print("  " + ", ".join(f"{name} {1000 / rate:.3f} ms" for name, rate in rates.items()))
    costs: dict[str, float] = {}
    for name, make, tries in (
        ("fresh ctx", lambda: Runner(fan_context(1000, 100), fresh_contexts=True), 1),
        ("memo off", lambda: Runner(replace(fan_context(1000, 100), memoize=False)), 3),
        ("cached", lambda: Runner(fan_context(1000, 100)), 3),
    ):
        for _ in range(tries):  # the best of a few: the box may be busy
            elapsed, steps = _whole_run(make(), 1)
            costs[name] = min(costs.get(name, elapsed / steps), elapsed / steps)
    print(
        "1000-branch parallel (maxConcurrency 100) whole run, per completed step "
        "(decide + fold; memo off and cached: best of 3):"
    )
    print("  " + ", ".join(f"{name} {cost * 1000:.3f} ms" for name, cost in costs.items()))
    print(
        f"  uncached/cached: fresh ctx {costs['fresh ctx'] / costs['cached']:.1f}x, "
        f"memo off {costs['memo off'] / costs['cached']:.1f}x"
    )


def scaling(lengths: tuple[int, ...] = (10, 100, 1000)) -> dict[int, float]:
    """Decide time per event folded, over whole chain runs of each length (best of 3)."""
    figures: dict[int, float] = {}
    for length in lengths:
        best = float("inf")
        for _ in range(3):
            runner = Runner(chain_context(length))
            spent = 0.0
            gc.collect()
            done = False
            while not done:
                state = runner.state
                start = time.perf_counter()
                decision = decide(runner.ctx, state)
                spent += time.perf_counter() - start
                done = decision.done
                for event in decision.events:
                    runner.add(event.type, event.payload, event.occurrence_id)
                for dispatch in decision.dispatch:
                    base = {"stepPath": dispatch.step_path, "attempt": dispatch.attempt}
                    runner.add("StepAttemptStarted", base, f"start:{dispatch.step_path}")
                    runner.add("StepCompleted", {**base, "output": {}}, f"end:{dispatch.step_path}")
            best = min(best, spent / runner.sequence)
        figures[length] = best
    print(
        "decide time per event, whole chain runs (best of 3): "
        + ", ".join(f"{n} steps {t * 1e6:.1f} us" for n, t in figures.items())
        + f"; 1000/10 ratio {figures[lengths[-1]] / figures[lengths[0]]:.2f}"
    )
    return figures


def main() -> None:
    if sys.argv[1:] == ["scaling"]:
        scaling()
        return
    scaling()
    chain = Runner(chain_context())
    while len([s for s in chain.state.steps.values() if s.status == "completed"]) < 100:
        chain.round()
    print(f"200-step chain, 100 done: {_rate(chain.ctx, chain.state):10.0f} decide calls/s")

    fan = Runner(fan_context())
    while _settled(fan) < 250:
        fan.round(complete=10)
    print(f"500-branch parallel, 250 settled: {_rate(fan.ctx, fan.state):7.0f} decide calls/s")

    for name, ctx, complete in (
        ("200-step chain", chain_context(), None),
        ("500-branch parallel", fan_context(), 1),
    ):
        runner = Runner(ctx)
        elapsed, steps = _whole_run(runner, complete)
        print(
            f"{name}: whole run {elapsed * 1000:.0f} ms, {runner.decides} decides, "
            f"{elapsed / steps * 1000:.3f} ms per completed step (decide + fold)"
        )
    wide_fan()


if __name__ == "__main__":
    main()
