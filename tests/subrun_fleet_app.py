"""The ``--app`` module of the sub-run fleet tests (``tests/test_subruns_fleet.py``) and of
``bench/subruns.py``. Fleet workers import it, so it imports nothing from pytest.

* ``kid`` (``sub.kid``): a child workflow of two ``tool.call`` steps (``first``, ``second``),
  each a call of ``kid_work``, which counts itself in Redis (``{prefix}kid:{n}:{step}``,
  prefix from ``$LITTLE_FLEET_FX_PREFIX``, Redis from ``$LITTLE_FLEET_FX_REDIS``), sleeps
  ``sleep`` seconds and fails (not retriable) for a negative ``n``.
* ``coder`` (``sub.coder``): a parent of one ``code.run`` step (``boss``) whose program calls
  ``kid`` as a tool twice, one after the other: ``n: 3`` (it reads the child's output) and
  ``n: -1`` (a failed child: it catches the ``ToolCallError``); each call suspends the step.
* ``boss`` (``sub.boss``): a parent of one ``ai.generate`` step whose model (``scripted/boss``)
  calls ``kid`` as a tool: the prompt names a scenario (:data:`SCENARIOS`), which says which
  calls the model makes in its first turn (all in one turn: parallel calls); once it sees
  tool results it answers :data:`DONE`. ``slow_tool`` sleeps (a parent's worker can be
  killed while its attempt is in it, after a child was started). ``sub.kid_paced`` is
  ``kid`` again under upstream's workflow budgets of one run at a time and one waiting
  (``max_concurrent_workflow_runs=1``, ``max_queued_workflow_runs=1``), and ``sub.kid_bulk``
  is ``kid`` for the bench's turn of 1,000 calls, all run at once.

The boss's script is installed at import when ``$LITTLE_SUBRUN_APP_SCRIPT`` is set (the test
fleet's workers), with rules that look at the request (not at their order): a worker that
resumes the step replays its first turn from the memo and asks only for the answer.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from little_dist import as_tool, define_workflow, model
from little_dist.errors import InvalidInputError
from little_dist.lwir.step_checks import code_file_digest
from little_dist.tools import tool

__all__ = [
    "CODER_PROGRAM",
    "DONE",
    "SCENARIOS",
    "boss",
    "coder",
    "kid",
    "kid_key",
    "kid_work",
    "slow_key",
    "slow_tool",
]

FX_REDIS_ENV = "LITTLE_FLEET_FX_REDIS"
FX_PREFIX_ENV = "LITTLE_FLEET_FX_PREFIX"
SCRIPT_ENV = "LITTLE_SUBRUN_APP_SCRIPT"
DONE = "all children answered"
KID_TOOL = "sub__kid"  # the wire name of the sub.kid tool
PACED_TOOL = "sub__kid_paced"
BULK_TOOL = "sub__kid_bulk"
#: Children ``sub.kid_bulk`` lets one turn run at once (upstream's workflow budgets default to
#: 10 at once and 100 waiting: the bench's turn starts 1,000).
BULK_CHILDREN = 1000


def _kid(n: int, sleep: float) -> tuple[str, dict[str, Any]]:
    return (KID_TOOL, {"n": n, "sleep": sleep})


#: scenario -> the calls of the boss's first turn.
SCENARIOS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "one": [_kid(1, 0.2)],
    "ten": [_kid(n, 0.3) for n in range(1, 11)],
    "slow": [_kid(n, 4.0) for n in range(1, 4)],
    "late": [_kid(n, 20.0) for n in range(1, 4)],  # (outlives a parent's deadline)
    "before-suspend": [_kid(1, 0.2), ("slow_tool", {"seconds": 8.0})],
    "fail": [_kid(1, 0.1), _kid(-1, 0.1)],
    "bench": [(BULK_TOOL, {"n": n, "sleep": 0.0}) for n in range(1, BULK_CHILDREN + 1)],
    "paced": [(PACED_TOOL, {"n": n, "sleep": 0.5}) for n in range(1, 4)],
}

_lock = threading.Lock()
_client: Any = None


def _redis() -> Any:
    global _client
    with _lock:
        if _client is None:
            import redis

            _client = redis.Redis.from_url(
                os.environ.get(FX_REDIS_ENV, "redis://127.0.0.1:6379/15"), socket_timeout=10
            )
        return _client


def _prefix() -> str:
    return os.environ.get(FX_PREFIX_ENV, "little-subrun-test:")


def kid_key(prefix: str, n: int, step: str) -> str:
    return f"{prefix}kid:{n}:{step}"


def slow_key(prefix: str) -> str:
    return f"{prefix}slow"


@tool
def kid_work(n: int, step: str, sleep: float = 0.0) -> dict[str, Any]:
    """Count one real call for (n, step), sleep, and fail for a negative n."""
    _redis().incr(kid_key(_prefix(), n, step))
    if sleep:
        time.sleep(sleep)
    if n < 0:
        raise InvalidInputError(f"kid {n} cannot work on a negative number")
    return {"n": n, "step": step, "value": 2 * n}


@tool
def slow_tool(seconds: float) -> dict[str, Any]:
    """Count one real call, then sleep ``seconds``."""
    _redis().incr(slow_key(_prefix()))
    time.sleep(seconds)
    return {"slept": seconds}


_KID_IN = {
    "type": "object",
    "required": ["n", "sleep"],
    "additionalProperties": False,
    "properties": {"n": {"type": "integer"}, "sleep": {"type": "number"}},
}
_OBJECT = {"type": "object"}


def _kid_step(step_id: str, needs: list[str]) -> dict[str, Any]:
    return {
        "id": step_id,
        "uses": "tool.call",
        "needs": needs,
        "with": {
            "tool": "kid_work",
            "args": {"n": "{{ input.n }}", "step": step_id, "sleep": "{{ input.sleep }}"},
        },
        "output": {"mode": "object", "schema": _OBJECT},
    }


kid = define_workflow(
    id="sub.kid",
    description="Two counted steps.",
    input=_KID_IN,
    output=_OBJECT,
    model="scripted/kid",
    tools=[kid_work],
    plan={
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "sub.kid", "version": "1.0.0"},
        "input": {"schema": _KID_IN},
        "output": {"schema": _OBJECT},
        "permissions": {"tools": ["kid_work"]},
        "steps": [_kid_step("first", []), _kid_step("second", ["first"])],
    },
)

_BOSS_IN = {
    "type": "object",
    "required": ["scenario"],
    "properties": {"scenario": {"type": "string"}},
}

boss = define_workflow(
    id="sub.boss",
    description="A model that calls the kid workflow as a tool.",
    input=_BOSS_IN,
    output=str,
    model=model("scripted/boss", id="boss", description="Scripted boss."),
    tools=[
        as_tool(kid),
        as_tool(
            kid, name="sub.kid_paced", max_concurrent_workflow_runs=1, max_queued_workflow_runs=1
        ),
        as_tool(kid, name="sub.kid_bulk", max_concurrent_workflow_runs=BULK_CHILDREN),
        slow_tool,
    ],
    plan={
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "sub.boss", "version": "1.0.0"},
        "input": {"schema": _BOSS_IN},
        "output": {"schema": {"type": "string"}},
        "permissions": {
            "models": ["boss"],
            "tools": ["sub.kid", "sub.kid_paced", "sub.kid_bulk", "slow_tool"],
        },
        "steps": [
            {
                "id": "boss",
                "uses": "ai.generate",
                "with": {"model": "boss", "prompt": "scenario:{{ input.scenario }}"},
                "output": {"mode": "text"},
            }
        ],
    },
)

CODER_PROGRAM = (
    "const ok = little.callTool('sub.kid', { n: 3, sleep: 0.1 });\n"
    "let failed = null;\n"
    "try { little.callTool('sub.kid', { n: -1, sleep: 0 }); }\n"
    "catch (e) { failed = [e.causeCode, e.message.includes('negative number')]; }\n"
    "console.log(JSON.stringify({ status: ok.status, value: ok.output.value, failed }));\n"
)

coder = define_workflow(
    id="sub.coder",
    description="A code.run program that calls the kid workflow as a tool.",
    input={"type": "object"},
    output=_OBJECT,
    model="scripted/none",
    tools=[as_tool(kid)],
    plan={
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "sub.coder", "version": "1.0.0"},
        "input": {"schema": {"type": "object"}},
        "output": {"schema": _OBJECT},
        "permissions": {"models": [], "tools": ["sub.kid"], "secrets": [], "network": []},
        "steps": [
            {
                "id": "boss",
                "uses": "code.run",
                "input": "{{ input }}",
                "with": {
                    "entrypoint": "main.ts",
                    "files": {
                        "main.ts": {
                            "content": CODER_PROGRAM,
                            "sha256": code_file_digest(CODER_PROGRAM),
                        }
                    },
                    "sandbox": {"network": "deny", "env": "deny", "fs": "deny"},
                },
                "output": {"mode": "object", "schema": _OBJECT},
            }
        ],
    },
)


def build_script() -> Any:
    """The boss's script (see the module docstring)."""
    from little_dist.testing import ScriptedModel

    script = ScriptedModel()
    script.on(model="boss", match=lambda request: bool(request.tool_results)).reply_text(
        DONE, times=None
    )
    for name, calls in SCENARIOS.items():
        script.on(model="boss", contains=f"scenario:{name}").call_tools(calls, times=None)
    return script


if os.environ.get(SCRIPT_ENV):
    build_script().install(model="boss")
