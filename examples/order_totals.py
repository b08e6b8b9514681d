"""Orders -> scratch files with bash -> totals by a ``code.run`` program (repaired by the fixer).

Run it offline (scripted model, local world; the commands run in the kernel sandbox, so
bubblewrap must be installed, as the README's setup does)::

    python -m examples.order_totals
    little run examples.order_totals:workflow --input examples/inputs/order_totals.json

Set ``LITTLE_MODEL=openai/gpt-4o-mini`` (and ``OPENAI_API_KEY``) to use a real model.

The fixed plan: ``collect``'s model writes the orders as a CSV file into its run scratch
with the ``bash`` tool (``/mnt/scratch/own/orders.csv``, published with the step's commit);
``check``'s model reads that file from ``/mnt/scratch/peer-steps/collect/`` with ``python3`` and
says what it found; ``totals`` is a ``code.run`` step, a pinned TypeScript program run by
Deno in the sandbox, which sums the amounts per region. The pinned program has a bug (it
reads ``input.order``): its first attempt fails, and the step's ``onFailure.fixer`` gets the
failure and the source. In the offline script the fixer's first repair still fails (it
prints text, not JSON); its second works, is run, and its output is the step's. ``report``
writes the summary. ``little events RUN_ID`` shows the commands
(``harness.runtime.command.*``), the scratch file (``harness.file.created``) and the repair.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from examples._common import SLOT, install_script, model_slot
from examples._common import main as run_main
from little_dist import WorkflowDefinition, define_workflow
from little_dist.lwir.step_checks import code_file_digest

__all__ = [
    "BUGGY_PROGRAM",
    "FIXED_PROGRAM",
    "PLAN",
    "SAMPLE_INPUT",
    "SCRIPT",
    "WORKFLOWS",
    "Orders",
    "Totals",
    "build_script",
    "build_workflow",
    "main",
    "planned_workflow",
    "workflow",
]


class Order(BaseModel):
    id: str
    region: str
    amount: float = Field(ge=0)


class Orders(BaseModel):
    """The orders to total."""

    orders: list[Order] = Field(min_length=1)


class Totals(BaseModel):
    """The totals per region and what the checker and the writer made of them."""

    totals: dict[str, float]
    checked: str = Field(description="What the check of the scratch file found.")
    summary: str


#: The pinned program, with its bug: ``input.order`` is undefined.
BUGGY_PROGRAM = (
    "const input = JSON.parse(await new Response(Deno.stdin.readable).text());\n"
    "const totals: Record<string, number> = {};\n"
    "for (const o of input.order) totals[o.region] = (totals[o.region] ?? 0) + o.amount;\n"
    "console.log(JSON.stringify({ totals }));\n"
)
#: What the fixer's second try proposes (its first prints text, not JSON).
FIXED_PROGRAM = BUGGY_PROGRAM.replace("input.order)", "input.orders)")
_HALF_FIXED = FIXED_PROGRAM.replace("JSON.stringify({ totals })", "'totals:', totals")

_TOTALS_SCHEMA = {
    "type": "object",
    "required": ["totals"],
    "properties": {"totals": {"type": "object", "additionalProperties": {"type": "number"}}},
}


def _bash_step(step_id: str, prompt: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": step_id,
        "uses": "ai.generate",
        "with": {"model": SLOT, "prompt": prompt, "tools": ["bash"]},
        "output": {"mode": "text"},
        **extra,
    }


def _plan(input_schema: Any, output_schema: Any) -> dict[str, Any]:
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {
            "name": "sales.order-totals",
            "version": "1.0.0",
            "description": "Orders to a scratch CSV, checked with bash, totalled by a program.",
        },
        "input": {"schema": input_schema},
        "output": {"schema": output_schema},
        "permissions": {"models": [SLOT], "tools": [], "secrets": [], "network": []},
        "steps": [
            _bash_step(
                "collect",
                "Write these orders to orders.csv (header id,region,amount) in your scratch "
                "folder with bash: {{ json(input.orders) }}",
            ),
            _bash_step(
                "check",
                "Check /mnt/scratch/peer-steps/collect/orders.csv with bash: how many orders, "
                "and the sum of their amounts? Answer in one sentence.",
                needs=["collect"],
            ),
            {
                "id": "totals",
                "uses": "code.run",
                "needs": ["collect"],
                "input": {"orders": "{{ input.orders }}"},
                "with": {
                    "entrypoint": "main.ts",
                    "files": {
                        "main.ts": {
                            "content": BUGGY_PROGRAM,
                            "sha256": code_file_digest(BUGGY_PROGRAM),
                        }
                    },
                    "sandbox": {"network": "deny", "env": "deny", "fs": "deny"},
                },
                "output": {"mode": "object", "schema": _TOTALS_SCHEMA},
                "onFailure": {
                    "fixer": {
                        "model": SLOT,
                        "maxAttempts": 2,
                        "system": "Repair the program; keep its input and output contract.",
                    }
                },
            },
            {
                "id": "report",
                "uses": "ai.generate",
                "needs": ["check", "totals"],
                "with": {
                    "model": SLOT,
                    "tools": [],
                    "prompt": (
                        "Totals per region: {{ json(steps.totals.output.totals) }}. The check "
                        "found: {{ steps.check.output }}. Return the totals, the check's "
                        "finding as `checked` and a one-sentence summary."
                    ),
                },
                "output": {"mode": "object", "schema": output_schema},
            },
        ],
    }


def build_workflow(*, fixed_plan: bool = True) -> WorkflowDefinition:
    """The order-totals workflow; ``fixed_plan=False`` leaves the design to the planner."""
    return define_workflow(
        id="sales.order-totals",
        description=(
            "Write the orders to a CSV file in run scratch with bash, check the file with "
            "bash and python3 in a second step, total the amounts per region with a TypeScript "
            "program "
            "(repaired by the fixer when it fails), and summarise."
        ),
        input=Orders,
        output=Totals,
        model=model_slot("order-totals", "General-purpose model with a bash tool."),
        plan=PLAN if fixed_plan else None,
        bash={"python": True},
    )


SAMPLE_INPUT: dict[str, Any] = {
    "orders": [
        {"id": "o-1", "region": "north", "amount": 120.5},
        {"id": "o-2", "region": "south", "amount": 80.0},
        {"id": "o-3", "region": "north", "amount": 42.25},
        {"id": "o-4", "region": "west", "amount": 300.0},
    ]
}

_CSV = "id,region,amount\\no-1,north,120.5\\no-2,south,80.0\\no-3,north,42.25\\no-4,west,300.0\\n"
_WRITE = f"printf '{_CSV}' > orders.csv && wc -l orders.csv"
_CHECK = (
    'python3 -c "import csv; rows = list(csv.DictReader(open('
    "'/mnt/scratch/peer-steps/collect/orders.csv'))); "
    "print(len(rows), sum(float(r['amount']) for r in rows))\""
)
_CHECKED = "The file holds 4 orders whose amounts sum to 542.75."
_TOTALS = {"north": 162.75, "south": 80.0, "west": 300.0}


def _bash_then_answer(script: Any, step: str, command: str, answer: str, usage: Any) -> None:
    """``step``'s model runs ``command`` with bash, then answers (every run: the first call
    of a step has no tool result yet)."""
    script.on(step=step, match=lambda r: not r.tool_results).call_tool(
        "bash", {"cmd": command}, usage=usage, times=None
    )
    script.on(step=step, match=lambda r: bool(r.tool_results)).reply_text(
        answer, usage=usage, times=None
    )


def build_script() -> Any:
    """Believable replies for every model call (and the planner), with realistic usage."""
    from little_dist.testing import ScriptedModel, Usage

    script = ScriptedModel(latency=0.05)
    script.on(step="planner").reply_json(PLAN, usage=Usage(6210, 1900, cached=4096), times=None)
    _bash_then_answer(
        script, "collect", _WRITE, "Wrote orders.csv: 4 orders.", Usage(640, 70, cached=512)
    )
    _bash_then_answer(script, "check", _CHECK, _CHECKED, Usage(610, 48, cached=512))
    # The fixer: a second try (its prompt says the first repair failed) gets the real fix.
    script.on(step="totals", contains="The repaired program failed").reply_json(
        {"fixedSource": FIXED_PROGRAM, "output": {"totals": _TOTALS}},
        usage=Usage(1480, 160, cached=1024),
        times=None,
    )
    script.on(step="totals").reply_json(
        {"fixedSource": _HALF_FIXED, "output": {"totals": _TOTALS}},
        usage=Usage(1210, 150, cached=1024),
        times=None,
    )
    script.on(step="report").reply_json(
        {
            "totals": _TOTALS,
            "checked": _CHECKED,
            "summary": "West leads with 300.00 of 542.75; north 162.75, south 80.00.",
        },
        usage=Usage(720, 64, cached=512),
        times=None,
    )
    return script


#: The workflow without a plan (the planner designs it); its schemas shape the fixed plan.
planned_workflow = build_workflow(fixed_plan=False)
PLAN = _plan(planned_workflow.input_schema, planned_workflow.output_schema)
#: The workflow ``little run examples.order_totals:workflow`` runs: the fixed plan.
workflow = build_workflow()
#: What a fleet worker started with ``--app examples.order_totals`` serves under the
#: workflow's id: the fixed plan, as ``little submit examples.order_totals:workflow`` runs it (one
#: workflow per id; the planned one: ``--app examples.order_totals:planned_workflow``).
WORKFLOWS = [workflow]
#: The installed offline script (``None`` when ``LITTLE_MODEL`` is set).
SCRIPT = install_script("order-totals", build_script)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m examples.order_totals [--planner]``."""
    return run_main(
        argv,
        name="order_totals",
        fixed=workflow,
        planned=planned_workflow,
        sample_input=SAMPLE_INPUT,
    )


if __name__ == "__main__":
    raise SystemExit(main())
