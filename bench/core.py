"""Pure-core benchmarks: compile a 200-step LWIR, evaluate expressions, start ``little validate``.

Run from the repository root::

    .venv/bin/python bench/core.py [--runs N]

Prints three figures, each against a baseline so the numbers mean something on any machine:

(a) validate + compile of a generated 200-step LWIR (median of N runs; target < 50 ms);
(b) ``{{ }}`` expression evaluations per second against plain Python dict lookups and
    string formatting of the same values;
(c) cold start of ``little validate examples/lwir/support-triage.json`` (median of 10
    subprocess runs; target < 0.6 s) against ``python -c pass``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from little_dist.compiler import compile_lwir
from little_dist.expressions import evaluate
from little_dist.lwir import validate_lwir

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "lwir" / "support-triage.json"
COMPILE_TARGET_S = 0.050
COLD_START_TARGET_S = 0.6

SUMMARY_SCHEMA = {
    "type": "object",
    "required": ["summary", "score"],
    "additionalProperties": False,
    "properties": {
        "summary": {"type": "string", "maxLength": 2000},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
    },
}


def generated_lwir(total_steps: int = 200) -> dict[str, Any]:
    """A realistic LWIR with ``total_steps`` top-level steps.

    A chain of alternating tool.call and ai.generate steps whose prompts and arguments read
    earlier steps' outputs, a parallel fan-out over the input items, a review loop closed by a
    decision (maxVisits 5), and one final step that joins everything.
    """
    steps: list[dict[str, Any]] = [
        {
            "id": "load-0",
            "uses": "tool.call",
            "with": {"tool": "search", "args": {"query": "{{ input.query }}", "limit": 20}},
            "output": {"mode": "json", "schema": True},
        }
    ]
    # Fixed steps: fan-out, the three loop steps and the final join.
    chain_length = total_steps - 1 - 5
    previous = "load-0"
    for index in range(1, chain_length + 1):
        needs = [previous]
        if index >= 4:
            needs.append(steps[index - 3]["id"])
        if index % 2:
            step_id = f"gen-{index}"
            reads = " and ".join(f"{{{{ steps.{need}.output.summary }}}}" for need in needs)
            steps.append(
                {
                    "id": step_id,
                    "uses": "ai.generate",
                    "needs": needs,
                    "with": {
                        "model": "model.fast" if index % 3 else "model.structured",
                        "prompt": f"Question: {{{{ input.query }}}}. Build on {reads}.",
                    },
                    "output": {"mode": "object", "schema": SUMMARY_SCHEMA},
                }
            )
        else:
            step_id = f"tool-{index}"
            steps.append(
                {
                    "id": step_id,
                    "uses": "tool.call",
                    "needs": needs,
                    "with": {
                        "tool": "search" if index % 4 else "fetchPage",
                        "args": {
                            "query": f"{{{{ steps.{previous}.output.summary }}}}",
                            "strict": f"{{{{ steps.{previous}.output.score >= 0.5 }}}}",
                            "user": "{{ lower(input.user) }}",
                        },
                    },
                    "output": {"mode": "object", "schema": SUMMARY_SCHEMA},
                }
            )
        previous = step_id
    branch_output = {
        "type": "object",
        "required": ["id", "score"],
        "properties": {"id": {"type": "string"}, "score": {"type": "number"}},
    }
    steps.append(
        {
            "id": "fanout",
            "uses": "parallel",
            "needs": ["load-0"],
            "with": {
                "items": "{{ input.items }}",
                "itemKey": "{{ item.id }}",
                "cardinality": {"kind": "matches_items"},
                "maxBranches": 50,
                "maxConcurrency": 8,
                "failureMode": "all_settled",
                "fanIn": {"order": "input", "output": "array"},
            },
            "steps": [
                {
                    "id": "score-item",
                    "uses": "ai.generate",
                    "needs": ["load-0"],
                    "with": {
                        "model": "model.fast",
                        "prompt": "Score {{ item.title }} against {{ steps.load-0.output }}.",
                    },
                    "output": {"mode": "object", "schema": branch_output},
                }
            ],
            "output": {
                "mode": "array",
                "schema": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["itemKey", "status", "output", "outputRef", "artifacts"],
                        "properties": {
                            "itemKey": {"type": "string"},
                            "status": {"const": "completed"},
                            "output": branch_output,
                            "outputRef": {"type": "string"},
                            "artifacts": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                },
            },
        }
    )
    steps += [
        {
            "id": "draft",
            "uses": "ai.generate",
            "maxVisits": 5,
            "with": {"model": "model.fast", "prompt": "Draft an answer to {{ input.query }}."},
            "output": {"mode": "text"},
        },
        {
            "id": "review",
            "uses": "ai.generate",
            "needs": ["draft"],
            "maxVisits": 5,
            "with": {
                "model": "model.structured",
                "prompt": "Review: {{ steps.draft.lastOutput }}",
            },
            "output": {
                "mode": "object",
                "schema": {
                    "type": "object",
                    "required": ["ok"],
                    "properties": {"ok": {"type": "boolean"}},
                },
            },
        },
        {
            "id": "route",
            "uses": "decision",
            "needs": ["review"],
            "maxVisits": 5,
            "with": {
                "cases": [{"when": "{{ steps.review.lastOutput.ok }}", "to": "end"}],
                "default": "draft",
            },
        },
        {
            "id": "final",
            "uses": "ai.generate",
            "needs": [previous, "fanout"],
            "with": {
                "model": "model.structured",
                "prompt": "Combine {{ steps." + previous + ".output.summary }} with "
                "{{ json(steps.fanout.output) }}.",
            },
            "output": {"mode": "object", "schema": SUMMARY_SCHEMA},
        },
    ]
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "bench.research", "version": "0.1.0-alpha"},
        "input": {
            "schema": {
                "type": "object",
                "required": ["query", "user", "items"],
                "properties": {
                    "query": {"type": "string"},
                    "user": {"type": "string"},
                    "items": {"type": "array", "items": {"type": "object"}},
                },
            }
        },
        "output": {"schema": SUMMARY_SCHEMA},
        "permissions": {
            "models": ["model.fast", "model.structured"],
            "tools": ["search", "fetchPage"],
            "secrets": [],
            "network": [],
        },
        "steps": steps,
    }


def median_seconds(action: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def bench_compile(runs: int) -> None:
    doc = generated_lwir()
    findings = validate_lwir(doc)
    if findings:
        raise SystemExit(f"generated LWIR is invalid: {findings[0]}")
    bench_input = {"query": "q", "user": "Ada", "items": [{"id": "a"}]}
    compile_lwir(doc, input=bench_input)  # warm caches, as a long-lived worker would be
    validate_only = median_seconds(lambda: validate_lwir(doc), runs)
    full = median_seconds(lambda: compile_lwir(doc, input=bench_input), runs)
    verdict = "ok" if full < COMPILE_TARGET_S else "OVER TARGET"
    print(f"(a) validate + compile, {len(doc['steps'])}-step LWIR (median of {runs})")
    print(f"    validate only        {validate_only * 1000:8.2f} ms")
    print(
        f"    validate + compile   {full * 1000:8.2f} ms   target < "
        f"{COMPILE_TARGET_S * 1000:.0f} ms: {verdict}"
    )


EXPRESSION_CONTEXT: dict[str, Any] = {
    "input": {
        "query": "Why did the export fail?",
        "user": {"name": "Ada", "tier": "gold"},
        "items": [{"id": "a", "title": "first"}, {"id": "b", "title": "second"}],
    },
    "steps": {
        "classify": {"output": {"severity": "high", "score": 0.82, "tags": ["export", "bug"]}},
        "lookup-customer": {"output": {"plan": "enterprise", "seats": 40}},
    },
}
TEMPLATES = (
    "{{ steps.classify.output.severity }}",
    "{{ input.user.name }}",
    "{{ steps.classify.output.score >= 0.5 }}",
    "{{ steps.classify.output.severity == 'high' && steps.lookup-customer.output.seats > 10 }}",
    "{{ upper(input.user.tier) }}",
    "{{ len(steps.classify.output.tags) }}",
    "Hello {{ input.user.name }}, your {{ steps.lookup-customer.output.plan }} plan is affected.",
    "{{ coalesce(steps.classify.output.missing, input.query) }}",
)


def _baseline_round(context: dict[str, Any]) -> list[Any]:
    # The same eight values computed by hand: what a step would cost with no template language.
    steps = context["steps"]
    user = context["input"]["user"]
    classify = steps["classify"]["output"]
    customer = steps["lookup-customer"]["output"]
    missing = classify.get("missing")
    return [
        classify["severity"],
        user["name"],
        classify["score"] >= 0.5,
        classify["severity"] == "high" and customer["seats"] > 10,
        str(user["tier"]).upper(),
        len(classify["tags"]),
        "Hello {}, your {} plan is affected.".format(user["name"], customer["plan"]),
        missing if missing is not None else context["input"]["query"],
    ]


def bench_expressions(seconds: float = 1.0) -> None:
    for template in TEMPLATES:  # fail loudly rather than time an error path
        evaluate(template, EXPRESSION_CONTEXT)
    expected = [evaluate(template, EXPRESSION_CONTEXT) for template in TEMPLATES]
    if expected != _baseline_round(EXPRESSION_CONTEXT):
        raise SystemExit(f"baseline disagrees with evaluate: {expected}")

    def rate(one_round: Callable[[], object]) -> float:
        rounds = 0
        started = time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            for _ in range(100):
                one_round()
            rounds += 100
        return rounds * len(TEMPLATES) / elapsed

    evaluated = rate(lambda: [evaluate(t, EXPRESSION_CONTEXT) for t in TEMPLATES])
    baseline = rate(lambda: _baseline_round(EXPRESSION_CONTEXT))
    print(f"(b) expression evaluation ({len(TEMPLATES)} templates: paths, comparisons, functions)")
    print(f"    little_dist.expressions.evaluate  {evaluated:12,.0f} evals/s")
    print(f"    plain dict lookups / str.format  {baseline:12,.0f} values/s")
    print(f"    evaluate is {baseline / evaluated:.1f}x slower than the hand-written baseline")


def bench_cold_start(runs: int = 10) -> None:
    little = Path(sys.executable).parent / "little"
    command = [str(little)] if little.exists() else [sys.executable, "-m", "little_dist.cli"]

    def run(argv: list[str]) -> None:
        subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)

    validate = median_seconds(lambda: run([*command, "validate", str(EXAMPLE)]), runs)
    bare = median_seconds(lambda: run([sys.executable, "-c", "pass"]), runs)
    verdict = "ok" if validate < COLD_START_TARGET_S else "OVER TARGET"
    print(f"(c) cold start (median of {runs} subprocess runs)")
    print(f"    little validate {EXAMPLE.relative_to(ROOT)}  {validate * 1000:7.0f} ms")
    print(f"    python -c pass                                   {bare * 1000:7.0f} ms")
    print(
        f"    little validate costs {(validate - bare) * 1000:.0f} ms over a bare interpreter; "
        f"target < {COLD_START_TARGET_S:.1f} s: {verdict}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="compile runs (default 20)")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]} on {sys.platform}")
    bench_compile(args.runs)
    bench_expressions()
    bench_cold_start()


if __name__ == "__main__":
    main()
