"""What the examples share: the model slot, the offline script, and ``main()``.

Offline by default. When ``LITTLE_MODEL`` is unset, an example's model is
``scripted/<example>`` — a scripted provider registered with litellm, installed when the
example module is imported (so ``little run examples.support_triage:workflow`` works
offline too) — priced as ``openai/gpt-4o-mini`` so the report shows dollars. Set
``LITTLE_MODEL=openai/gpt-4o-mini`` (and ``OPENAI_API_KEY``), or any litellm model string,
to run the same workflow on a real model: nothing is scripted then.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from little_dist import (
    ModelSlot,
    RunFailedError,
    RunResult,
    WorkflowDefinition,
    model,
    run_workflow,
)

__all__ = ["MODEL_ENV", "PRICING_KEY", "SLOT", "install_script", "main", "model_slot", "offline"]

MODEL_ENV = "LITTLE_MODEL"
#: The registry key the scripted model's tokens are priced under.
PRICING_KEY = "openai/gpt-4o-mini"
#: The model slot id every example's LWIR names in ``with.model``.
SLOT = "default"


def offline() -> bool:
    """True when no real model was asked for (``LITTLE_MODEL`` unset or empty)."""
    return not os.environ.get(MODEL_ENV, "").strip()


def model_slot(example: str, description: str = "") -> ModelSlot:
    """The examples' one model slot: ``LITTLE_MODEL`` if set, else the scripted model."""
    if offline():
        return model(f"scripted/{example}", id=SLOT, description=description, pricing=PRICING_KEY)
    return model(os.environ[MODEL_ENV].strip(), id=SLOT, description=description)


def install_script(example: str, build: Callable[[], Any]) -> Any:
    """Build and install the example's :class:`~little_dist.testing.ScriptedModel` for its
    own model, ``scripted/<example>``, when offline (so several examples imported into one
    process, or one worker, each answer their own calls); ``None`` (nothing installed) when a
    real model is configured."""
    if not offline():
        return None
    script = build()
    script.install(model=example)
    return script


def main(
    argv: Sequence[str] | None,
    *,
    name: str,
    fixed: WorkflowDefinition,
    planned: WorkflowDefinition,
    sample_input: Any,
) -> int:
    """Run an example once on the local world and print what happened."""
    parser = argparse.ArgumentParser(prog=f"python -m examples.{name}")
    parser.add_argument(
        "--planner",
        action="store_true",
        help="let the planner design the workflow instead of using the fixed plan",
    )
    parser.add_argument("--data-dir", default=".little-workflow", help="LocalWorld directory")
    parser.add_argument("--input", help="run input as JSON (default: a built-in sample)")
    args = parser.parse_args(argv)
    from little_dist.world.local import LocalWorld

    workflow = planned if args.planner else fixed
    run_input = sample_input if args.input is None else json.loads(args.input)
    where = "scripted model (offline)" if offline() else os.environ[MODEL_ENV]
    print(f"Running {workflow.id} on {where} ...", file=sys.stderr)
    try:
        result: RunResult = run_workflow(
            workflow, run_input, world=LocalWorld(args.data_dir), max_workers=4
        )
    except RunFailedError as error:
        print(f"Run {error.run_id} failed: {error}", file=sys.stderr)
        return 1
    output = result.output
    if hasattr(output, "model_dump"):
        output = output.model_dump(mode="json")
    print(json.dumps(output, indent=2, ensure_ascii=False))
    usage = result.usage
    cost = "unpriced" if usage.cost_usd is None else f"${usage.cost_usd:.6f}"
    where_flag = "" if args.data_dir == ".little-workflow" else f" --data-dir {args.data_dir}"
    little = _little_command()
    print(
        f"\nrun id: {result.run_id}\n"
        f"tokens: {usage.input_tokens} in ({usage.cached_input_tokens} cached), "
        f"{usage.output_tokens} out; cost {cost}\n"
        f"Try:  {little} report {result.run_id}{where_flag}   (per-step tokens and dollars)\n"
        f"      {little} events {result.run_id}{where_flag}   (the event log)",
    )
    return 0


def _little_command() -> str:
    """How to call ``little`` from here: the script beside this interpreter when the virtual
    environment is not on PATH (the README's first command does not activate it)."""
    script = Path(sys.executable).with_name("little")
    if shutil.which("little") == str(script) or not script.exists():
        return "little"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)
