"""The ``--app`` module of the deadline and cancellation tests (``tests/test_cancel*.py``).
Fleet workers import it, so it imports nothing from pytest.

* ``slow`` (``cancel.slow``): one ``ai.generate`` step (``think``) of ``scripted/slow``, whose
  provider (:func:`build_script`) answers after ``latency`` seconds: a call slow enough to
  be cancelled, or to outlive a deadline, while it is in flight.
* ``two`` (``cancel.two``): ``first`` then ``second``, each such a call (a run interrupted
  during ``second`` resumes with ``first`` done).
* ``flaky`` (``cancel.flaky``): one call, no ``retry`` of its own; its provider fails the
  first call with a retriable error (run-level ``max_attempts`` decides whether it is tried
  again).
* ``timed`` (``cancel.timed``): ``slow`` with upstream's run-level ``timeout`` of 1 s.
* ``planned`` (``cancel.planned``): no fixed plan (its runs wait for a planner).
"""

from __future__ import annotations

from typing import Any

from little_dist import define_workflow, model
from tests.lwir_builder import workflow_doc

__all__ = ["REPLY", "build_script", "flaky", "planned", "slow", "timed", "two"]

SLOT = "default"
REPLY = "done thinking"
_SLOT = model("scripted/slow", id=SLOT, max_tokens=32)
_INPUT = {"type": "object", "properties": {"item": {"type": "string"}}}


def _think(step_id: str, needs: str | None) -> dict[str, Any]:
    return {
        **({} if needs is None else {"needs": [needs]}),
        "id": step_id,
        "uses": "ai.generate",
        "with": {"model": SLOT, "prompt": f"Think ({step_id}) about {{{{ input.item }}}}."},
        "output": {"mode": "text"},
    }


def _workflow(workflow_id: str, steps: list[str], **options: Any) -> Any:
    return define_workflow(
        id=workflow_id,
        description="Slow model calls, to be cancelled or timed out in flight.",
        input=_INPUT,
        output={"type": "string"},
        model=_SLOT,
        plan=workflow_doc(
            workflow_id,
            [_think(step, steps[i - 1] if i else None) for i, step in enumerate(steps)],
            input_schema=_INPUT,
            output_schema={"type": "string"},
            models=[SLOT],
            version="1.0.0",
        ),
        **options,
    )


slow = _workflow("cancel.slow", ["think"])
two = _workflow("cancel.two", ["first", "second"])
flaky = _workflow("cancel.flaky", ["think"])
timed = _workflow("cancel.timed", ["think"], timeout="1s")
#: No fixed plan: its runs wait for the fleet's planner.
planned = define_workflow(
    id="cancel.planned",
    description="A workflow the planner plans.",
    input=_INPUT,
    output={"type": "string"},
    model=_SLOT,
)


def build_script(*, latency: float = 0.0, fail_first: bool = False, call_log: Any = None) -> Any:
    """The provider: :data:`REPLY` after ``latency`` seconds; ``fail_first``: the first call
    fails with a rate limit (retriable)."""
    from little_dist.testing import ScriptedModel

    script = ScriptedModel(latency=latency, call_log=call_log)
    if fail_first:
        script.fail(times=1, error="rate_limit")
    script.otherwise().reply_text(REPLY, times=None)
    return script
