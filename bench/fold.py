"""Fold throughput: events folded per second into a RunState.

Generates one realistic run: 200 top-level steps, every fifth a parallel group of 20
branches; each step execution opens a harness session with model turns (usage with cache
hits, several models including an unpriced one) and tool calls, writes an artifact and
completes. About 100k events. Then times:

* bulk: ``materialize_run_state(events)`` on envelope dicts;
* scheduler: a ``RunStateBuilder`` folding one event at a time (``apply``), with a
  snapshot every 50 events (what a scheduler does between decisions);
* models: the same bulk fold over ``Event`` models.

Run: ``.venv/bin/python bench/fold.py [--profile]``
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from typing import Any

from little_dist.events import Event
from little_dist.run_state import RunStateBuilder, materialize_run_state

RUN_ID = "run_bench_fold"
MODELS = [
    {"provider": "openai.responses", "modelId": "gpt-4o-mini"},
    {"provider": "openai", "modelId": "gpt-4o"},
    {"provider": "anthropic", "modelId": "claude-sonnet-4"},
    {"provider": "local", "modelId": "llama-unpriced"},
]


def generate_events(steps: int = 200, branches: int = 20, turns: int = 30) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []

    def emit(type_: str, payload: dict[str, Any]) -> None:
        sequence = len(events) + 1
        events.append(
            {
                "eventId": f"evt_{sequence:016x}",
                "runId": RUN_ID,
                "sequence": sequence,
                "type": type_,
                "recordedAt": f"2026-01-01T00:{sequence // 60000 % 60:02d}:"
                f"{sequence // 1000 % 60:02d}.{sequence % 1000:03d}Z",
                "payload": payload,
            }
        )

    def execute(path: str, salt: int) -> None:
        emit("StepScheduled", {"stepPath": path})
        emit("StepAttemptStarted", {"stepPath": path, "attemptId": "attempt_1"})
        emit("harness.session.started", {"runId": RUN_ID, "manifest": {"stepPath": path}})
        for turn in range(1, turns + 1):
            model = MODELS[(salt + turn) % len(MODELS)]
            emit("harness.model.called", {"stepPath": path, "turn": turn, "model": model})
            emit(
                "harness.model.responded",
                {
                    "stepPath": path,
                    "turn": turn,
                    "model": model,
                    "response": {
                        "text": "ok",
                        "usage": {
                            "inputTokens": 1000 + 37 * turn + salt,
                            "outputTokens": 200 + 11 * turn,
                            "inputTokenDetails": {"cacheReadTokens": 500 + turn},
                            "outputTokenDetails": {"reasoningTokens": 3 * turn},
                        },
                    },
                },
            )
            emit("harness.tool_call.started", {"stepPath": path, "callId": f"c{turn}"})
            emit(
                "harness.tool_call.succeeded",
                {"stepPath": path, "callId": f"c{turn}", "result": {"ok": True}},
            )
        ref = f"artifact://art_{salt:016x}"
        emit("ArtifactCreated", {"stepPath": path, "artifactRef": ref})
        emit(
            "StepCompleted",
            {
                "stepPath": path,
                "output": {"n": salt},
                "outputRef": ref,
                "artifactRefs": [ref],
                "metadata": {"outputMode": "object"},
            },
        )
        emit("harness.session.completed", {"runId": RUN_ID, "usage": {"inputTokens": 1}})

    emit("RunStarted", {"workflowVersionId": "wfver_0123456789abcdef"})
    salt = 0
    for index in range(steps):
        path = f"step_{index}"
        if index % 5 == 4:
            emit("StepScheduled", {"stepPath": path})
            emit("StepAttemptStarted", {"stepPath": path, "attemptId": "attempt_1"})
            emit(
                "ParallelGroupStarted",
                {"stepPath": path, "branchCount": branches, "failureMode": "all_settled"},
            )
            for branch in range(branches):
                branch_path = f"{path}[k{branch}]"
                emit(
                    "ParallelBranchScheduled",
                    {
                        "stepPath": path,
                        "branchPath": branch_path,
                        "itemKey": f"k{branch}",
                        "branchIndex": branch,
                    },
                )
            for branch in range(branches):
                branch_path = f"{path}[k{branch}]"
                salt += 1
                execute(f"{branch_path}.work", salt)
                emit("ParallelBranchCompleted", {"stepPath": path, "branchPath": branch_path})
            emit("ParallelGroupCompleted", {"stepPath": path})
            emit("StepCompleted", {"stepPath": path, "output": [b for b in range(branches)]})
        else:
            salt += 1
            execute(path, salt)
    emit("RunCompleted", {"output": {"done": True}})
    return events


def _rate(label: str, count: int, seconds: float) -> float:
    rate = count / seconds
    print(f"{label:<34} {count:>8} events  {seconds * 1000:8.1f} ms  {rate:>12,.0f} events/s")
    return rate


def _best(fn: Any, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="cProfile the bulk fold")
    args = parser.parse_args()

    events = generate_events()
    count = len(events)
    state = materialize_run_state(events)
    print(
        f"run: {len(state.steps)} steps, {len(state.parallel_groups)} parallel groups, "
        f"{state.usage.priced_calls + state.usage.unpriced_calls} model calls, "
        f"${state.usage.cost_usd:.4f}"
    )

    _rate("bulk fold (dicts)", count, _best(lambda: materialize_run_state(events), args.repeat))

    def scheduler() -> None:
        builder = RunStateBuilder(RUN_ID)
        for index, event in enumerate(events):
            builder.apply(event)
            if index % 50 == 0:
                builder.snapshot()
        builder.snapshot()

    _rate("per-event apply + snapshot/50", count, _best(scheduler, args.repeat))

    models = [Event.model_validate(e) for e in events]
    _rate(
        "bulk fold (Event models)", count, _best(lambda: materialize_run_state(models), args.repeat)
    )

    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        materialize_run_state(events)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
