"""The ``--app`` module of the fleet's end-to-end tests and of ``bench/fleet.py``.

Fleet workers import it (``little worker --app tests.fleet_app``, run from the repository
root), so it imports nothing from pytest. It holds:

* ``effect``: the side-effect probe. Every real call does one Redis ``INCR`` on
  ``{prefix}fx:{run}:{step}`` (prefix from ``$LITTLE_FLEET_FX_PREFIX``, Redis from
  ``$LITTLE_FLEET_FX_REDIS``), then sleeps ``sleep`` seconds (while sleeping, ``run:step`` is
  in the set :func:`running_key` of the process, so a test can kill a worker mid-call). A
  call replayed from the memo does not reach the function, so the counter is exactly the
  number of real executions.
  ``step`` is the step path of the calling step (the LWIR passes it in; a tool cannot see
  its own path otherwise) and ``run`` the run id (the tests put it in the run input).
* ``noop``: does nothing (the benchmark's no-op tool; read-only, so a step of it is one
  append: its call goes with the commit).
* the workflows: ``screening`` (example-like: a tool step, a parallel fan-out of tool steps,
  then a scripted-model summary), ``wide_fan`` (one fan-out of ``effect`` steps whose
  ``maxConcurrency``, 20, is wider than a test fleet), and the benchmarks' ``chain100``, ``chain5``,
  ``fan1000`` and ``model500``.
* a delivery probe: when ``$LITTLE_FLEET_DELIVERY_PREFIX`` is set, every
  ``little.execute_step`` a worker starts does an ``INCR`` on
  ``{prefix}delivery:{run}:{path}:{attempt}`` (Celery's ``task_prerun`` signal), so a test
  counts how many times each attempt was *sent*, not only how many times it ran.
* a hold on model calls: when ``$LITTLE_FLEET_HOLD_MODEL`` names a file, every model call
  (``litellm.completion``, after the harness recorded ``harness.model.called``) waits until
  that file exists, so a test acts while a call is in flight for as long as it needs rather
  than within a fixed latency.

Model slot ``default`` is ``scripted/fleet``: workers install the script named by
``LITTLE_SCRIPTED_MODEL`` (see :func:`build_script`).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from little_dist import define_workflow, model
from little_dist.tools import tool
from tests.lwir_builder import fan_in_schema, workflow_doc

__all__ = [
    "BENCH_CHAIN_STEPS",
    "BENCH_FAN_BRANCHES",
    "BENCH_MODEL_STEPS",
    "DELIVERY_PREFIX_ENV",
    "FX_PREFIX_ENV",
    "FX_REDIS_ENV",
    "HOLD_MODEL_ENV",
    "SUMMARY",
    "build_script",
    "chain5",
    "chain100",
    "effect",
    "effect_key",
    "fan1000",
    "model500",
    "noop",
    "running_key",
    "screening",
    "screening_paths",
    "slow_chain",
    "wide_fan",
]

FX_REDIS_ENV = "LITTLE_FLEET_FX_REDIS"
FX_PREFIX_ENV = "LITTLE_FLEET_FX_PREFIX"
DELIVERY_PREFIX_ENV = "LITTLE_FLEET_DELIVERY_PREFIX"
HOLD_MODEL_ENV = "LITTLE_FLEET_HOLD_MODEL"
#: The longest a held model call waits for its file (then it goes on: a test that forgot to
#: release it fails on what follows, not by hanging).
HOLD_MODEL_LIMIT = 120.0
SLOT = "default"
SUMMARY = {"verdict": "done", "notes": "every item was processed"}
BENCH_CHAIN_STEPS = 100
BENCH_FAN_BRANCHES = 1000
BENCH_MODEL_STEPS = 500

_client_lock = threading.Lock()
_client: Any = None


def _redis() -> Any:
    """One Redis client per process (tools run on many worker threads)."""
    global _client
    with _client_lock:
        if _client is None:
            import redis

            url = os.environ.get(FX_REDIS_ENV, "redis://127.0.0.1:6379/15")
            _client = redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=10)
        return _client


def effect_key(prefix: str, run: str, step: str) -> str:
    """The Redis counter of real ``effect`` calls for one run and step path."""
    return f"{prefix}fx:{run}:{step}"


def running_key(prefix: str, pid: int) -> str:
    """The Redis set of ``run:step`` calls process ``pid`` is sleeping in right now."""
    return f"{prefix}fx-running:{pid}"


@tool
def effect(run: str, step: str, sleep: float = 0.0) -> dict[str, Any]:
    """Count one real side effect for (run, step) in Redis, then sleep ``sleep`` seconds."""
    prefix = os.environ.get(FX_PREFIX_ENV, "little-fleet-test:")
    client = _redis()
    count = int(client.incr(effect_key(prefix, run, step)))
    if sleep:
        # Which calls this process is in the middle of (a test picks its moment to kill it).
        member = f"{run}:{step}"
        client.sadd(running_key(prefix, os.getpid()), member)
        time.sleep(sleep)
        client.srem(running_key(prefix, os.getpid()), member)
    return {"step": step, "count": count, "pid": os.getpid()}


@tool(read_only=True)  # (it changes nothing: its call goes with the step's commit)
def noop(n: int = 0) -> dict[str, Any]:
    """Do nothing."""
    return {"n": n}


def _effect_step(step_id: str, step_path: str, **extra: Any) -> dict[str, Any]:
    step: dict[str, Any] = {
        "id": step_id,
        "uses": "tool.call",
        "with": {
            "tool": "effect",
            "args": {"run": "{{ input.run }}", "step": step_path, "sleep": "{{ input.sleep }}"},
        },
        "output": {"mode": "object", "schema": {"type": "object"}},
    }
    step.update(extra)
    return step


_SUMMARY_SCHEMA = {
    "type": "object",
    "required": ["verdict", "notes"],
    "additionalProperties": False,
    "properties": {"verdict": {"type": "string"}, "notes": {"type": "string"}},
}
_ITEMS_INPUT = {
    "type": "object",
    "required": ["run", "items", "sleep"],
    "properties": {
        "run": {"type": "string"},
        "items": {"type": "array", "items": {"type": "string"}},
        "sleep": {"type": "number"},
    },
}


def _effect_fan(
    *, max_branches: int, max_concurrency: int, needs: list[str] | None = None
) -> dict[str, Any]:
    """A parallel step ``fan`` running one counted side effect per item of ``input.items``."""
    step: dict[str, Any] = {"id": "fan", "uses": "parallel"}
    if needs:
        step["needs"] = needs
    step["with"] = {
        "items": "{{ input.items }}",
        "itemKey": "{{ item }}",
        "cardinality": {"kind": "matches_items"},
        "maxBranches": max_branches,
        "maxConcurrency": max_concurrency,
        "failureMode": "fail_fast",
        "fanIn": {"order": "input", "output": "array"},
    }
    step["output"] = {"mode": "array", "schema": fan_in_schema({"type": "object"})}
    step["steps"] = [_effect_step("work", "fan[{{ item }}].work")]
    return step


SCREENING_PLAN = workflow_doc(
    "fleet.screening",
    [
        _effect_step("prepare", "prepare"),
        _effect_fan(max_branches=20, max_concurrency=4, needs=["prepare"]),
        {
            "id": "summarize",
            "uses": "ai.generate",
            "needs": ["fan"],
            "with": {
                "model": SLOT,
                "prompt": "Summarize the results: {{ json(steps.fan.output) }}",
            },
            "output": {"mode": "object", "schema": _SUMMARY_SCHEMA},
        },
    ],
    input_schema=_ITEMS_INPUT,
    output_schema=_SUMMARY_SCHEMA,
    tools=["effect"],
    models=[SLOT],
    version="1.0.0",
)


WIDE_FAN_PLAN = workflow_doc(
    "fleet.wide-fan",
    [_effect_fan(max_branches=40, max_concurrency=20)],
    input_schema=_ITEMS_INPUT,
    output_schema={"type": "array"},
    tools=["effect"],
    models=[],
    version="1.0.0",
)


def screening_paths(items: list[str]) -> list[str]:
    """Every step path a completed ``screening`` run has."""
    return ["prepare", "fan", *(f"fan[{item}].work" for item in items), "summarize"]


def _chain_plan(length: int, name: str = "fleet.chain100") -> dict[str, Any]:
    steps = []
    for index in range(length):
        step: dict[str, Any] = {
            "id": f"s{index}",
            "uses": "tool.call",
            "with": {"tool": "noop", "args": {"n": index}},
            "output": {"mode": "object", "schema": {"type": "object"}},
        }
        if index:
            step["needs"] = [f"s{index - 1}"]
        steps.append(step)
    return workflow_doc(
        name,
        steps,
        input_schema={"type": "object"},
        output_schema={"type": "object"},
        tools=["noop"],
        models=[],
        version="1.0.0",
    )


def _slow_chain_plan(length: int) -> dict[str, Any]:
    steps = [
        _effect_step(f"s{index}", f"s{index}", **({"needs": [f"s{index - 1}"]} if index else {}))
        for index in range(length)
    ]
    return workflow_doc(
        "fleet.slow-chain",
        steps,
        input_schema=_SLOW_CHAIN_INPUT,
        output_schema={"type": "object"},
        tools=["effect"],
        models=[],
        version="1.0.0",
    )


_SLOW_CHAIN_INPUT = {
    "type": "object",
    "required": ["run", "sleep"],
    "properties": {"run": {"type": "string"}, "sleep": {"type": "number"}},
}

_KEYS_INPUT = {
    "type": "object",
    "required": ["keys"],
    "properties": {"keys": {"type": "array", "items": {"type": "string"}}},
}


def _fan_plan(name: str, child: dict[str, Any], item_schema: Any) -> dict[str, Any]:
    # maxBranches 100 is the most a valid LWIR declares; the engine cap
    # (LITTLE_MAX_BRANCHES_CAP) lifts such a step to the cap.
    return workflow_doc(
        name,
        [
            {
                "id": "fan",
                "uses": "parallel",
                "with": {
                    "items": "{{ input.keys }}",
                    "itemKey": "{{ item }}",
                    "cardinality": {"kind": "matches_items"},
                    "maxBranches": 100,
                    "maxConcurrency": 100,
                    "failureMode": "fail_fast",
                    "fanIn": {"order": "input", "output": "array"},
                },
                "output": {"mode": "array", "schema": fan_in_schema(item_schema)},
                "steps": [child],
            }
        ],
        input_schema=_KEYS_INPUT,
        output_schema={"type": "array"},
        tools=["noop"],
        models=[SLOT],
        version="1.0.0",
    )


_SLOT = model("scripted/fleet", id=SLOT, description="Scripted model of the fleet tests.")

screening = define_workflow(
    id="fleet.screening",
    description="Prepare, process every item in parallel, then summarize.",
    input=_ITEMS_INPUT,
    output=_SUMMARY_SCHEMA,
    model=_SLOT,
    tools=[effect],
    plan=SCREENING_PLAN,
)

chain100 = define_workflow(
    id="fleet.chain100",
    description="A chain of no-op tool steps (benchmark).",
    input={"type": "object"},
    output={"type": "object"},
    model=_SLOT,
    tools=[noop],
    plan=_chain_plan(BENCH_CHAIN_STEPS),
)

chain5 = define_workflow(
    id="fleet.chain5",
    description="A short chain of no-op tool steps (the cost benchmark's small run).",
    input={"type": "object"},
    output={"type": "object"},
    model=_SLOT,
    tools=[noop],
    plan=_chain_plan(5, "fleet.chain5"),
)

slow_chain = define_workflow(
    id="fleet.slow-chain",
    description="A chain of eight counted side effects that each take input.sleep seconds.",
    input=_SLOW_CHAIN_INPUT,
    output={"type": "object"},
    model=_SLOT,
    tools=[effect],
    plan=_slow_chain_plan(8),
)

wide_fan = define_workflow(
    id="fleet.wide-fan",
    description="One parallel step of counted side effects, up to 20 at a time.",
    input=_ITEMS_INPUT,
    output={"type": "array"},
    model=_SLOT,
    tools=[effect],
    plan=WIDE_FAN_PLAN,
)

fan1000 = define_workflow(
    id="fleet.fan1000",
    description="A wide parallel step of no-op tools (benchmark).",
    input=_KEYS_INPUT,
    output={"type": "array"},
    model=_SLOT,
    tools=[noop],
    plan=_fan_plan(
        "fleet.fan1000",
        {
            "id": "work",
            "uses": "tool.call",
            "with": {"tool": "noop", "args": {"n": 1}},
            "output": {"mode": "object", "schema": {"type": "object"}},
        },
        {"type": "object"},
    ),
)

model500 = define_workflow(
    id="fleet.model500",
    description="A wide parallel step of one-second model calls (benchmark).",
    input=_KEYS_INPUT,
    output={"type": "array"},
    model=_SLOT,
    tools=[noop],
    plan=_fan_plan(
        "fleet.model500",
        {
            "id": "think",
            "uses": "ai.generate",
            "with": {"model": SLOT, "prompt": "Think about {{ item }}."},
            "output": {"mode": "text"},
        },
        {"type": "string"},
    ),
)


def build_script(*, think_latency: float = 1.0) -> Any:
    """The scripted model the workers install: the summary, and the benchmark's thinking."""
    from little_dist.testing import ScriptedModel, Usage

    script = ScriptedModel()
    script.on(step="summarize").reply_json(SUMMARY, usage=Usage(900, 40, cached=512), times=None)
    script.otherwise().reply_text(
        "thought", usage=Usage(200, 10), latency=think_latency, times=None
    )
    return script


def _install_delivery_probe() -> None:
    prefix = os.environ.get(DELIVERY_PREFIX_ENV)
    if not prefix:
        return
    from celery.signals import task_prerun

    def count_delivery(sender: Any = None, args: Any = None, kwargs: Any = None, **_: Any) -> None:
        name = getattr(sender, "name", None)
        if name != "little.execute_step":
            return
        values = list(args or ())
        named = dict(kwargs or {})
        run_id = values[0] if len(values) > 0 else named.get("run_id")
        path = values[1] if len(values) > 1 else named.get("step_path")
        attempt = values[2] if len(values) > 2 else named.get("attempt")
        _redis().incr(f"{prefix}delivery:{run_id}:{path}:{attempt}")

    # weak=False: the handler is a closure that would otherwise be collected at once.
    task_prerun.connect(count_delivery, weak=False)


_install_delivery_probe()


def _install_model_hold() -> None:
    release = os.environ.get(HOLD_MODEL_ENV)
    if not release:
        return
    from pathlib import Path

    from little_dist.harness.model_calls import import_litellm

    litellm = import_litellm()
    completion = litellm.completion

    def held(*args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + HOLD_MODEL_LIMIT
        while not Path(release).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return completion(*args, **kwargs)

    litellm.completion = held


_install_model_hold()
