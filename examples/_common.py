"""What the examples share: the model slot, the offline script, and ``main()``.

Offline by default. When ``LITTLE_MODEL`` is unset, an example's model is
``scripted/<example>`` — a scripted provider registered with litellm, installed for that
model name when the example module is imported (so ``little run
examples.support_triage:workflow`` works offline too, and several examples imported into
one process each answer their own calls) — priced as ``openai/gpt-4o-mini`` so the report
shows dollars. Set ``LITTLE_MODEL=openai/gpt-4o-mini`` (and ``OPENAI_API_KEY``), or any
litellm model string, to run the same workflow on a real model: nothing is scripted then.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
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
    """Run an example once on the local world and print what happened.

    The run id is printed first (on stderr), so a run stopped part way (Ctrl-C, a crash) can
    be resumed with ``--run-id``. A bad ``--input`` (unreadable, not JSON, not matching the
    input schema), a bad ``--run-id``, a failed run and Ctrl-C each end with one line on
    stderr and a non-zero exit: 2 for usage errors, 1 for invalid input or a failed run, 130
    for Ctrl-C.
    """
    prog = f"python -m examples.{name}"
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument(
        "--planner",
        action="store_true",
        help="let the planner design the workflow instead of using the fixed plan",
    )
    parser.add_argument("--data-dir", default=".little-workflow", help="LocalWorld directory")
    parser.add_argument(
        "--input",
        metavar="FILE|JSON",
        help=f"run input: a JSON file or inline JSON (default: examples/inputs/{name}.json)",
    )
    parser.add_argument("--run-id", metavar="ID", help="resume (or read back) this run")
    args = parser.parse_args(argv)
    from little_dist.cli.json_input import read_input
    from little_dist.cli.run_problems import UsageProblem, one_line
    from little_dist.errors import InvalidInputError
    from little_dist.ids import validate_run_id
    from little_dist.local_runner import new_run_id
    from little_dist.world.local import LocalWorld

    def fail(message: str, code: int) -> int:
        print(f"{prog}: {one_line(message)}", file=sys.stderr, flush=True)
        return code

    workflow = planned if args.planner else fixed
    try:
        run_input = sample_input if args.input is None else read_input(args.input)
    except UsageProblem as problem:
        return fail(str(problem), 2)
    try:
        workflow.validate_input(run_input)
    except InvalidInputError as error:
        return fail(str(error), 1)
    run_id = args.run_id or new_run_id()
    try:
        validate_run_id(run_id)
    except InvalidInputError as error:
        return fail(f"--run-id: {error}", 2)
    where = "scripted model (offline)" if offline() else os.environ[MODEL_ENV]
    print(f"Running {workflow.id} on {where}: run id {run_id}", file=sys.stderr, flush=True)
    try:
        result: RunResult = _interruptible(
            lambda: run_workflow(
                workflow, run_input, world=LocalWorld(args.data_dir), run_id=run_id, max_workers=4
            )
        )
    except RunFailedError as error:
        return fail(f"run {error.run_id} failed: {error}", 1)
    except InvalidInputError as error:
        return fail(str(error), 1)
    except KeyboardInterrupt:
        resume = f"{prog} --run-id {run_id}"
        if args.data_dir != ".little-workflow":
            resume += f" --data-dir {args.data_dir}"
        fail(f"interrupted; the run is kept, resume it with: {resume}", 130)
        # Steps in flight are abandoned, not waited for (a model call may take minutes):
        # what they committed is in the log, and the resumed run redoes the rest.
        os._exit(130)
    output = result.output
    if hasattr(output, "model_dump"):
        output = output.model_dump(mode="json")
    print(json.dumps(output, indent=2, ensure_ascii=False))
    usage = result.usage
    cost = "unpriced" if usage.cost_usd is None else f"${usage.cost_usd:.6f}"
    where_flag = "" if args.data_dir == ".little-workflow" else f" --data-dir {args.data_dir}"
    little = _little_command()
    sub_runs = _sub_runs_line(args.data_dir, result.run_id)
    print(
        f"\nrun id: {result.run_id}\n"
        f"tokens: {usage.input_tokens} in ({usage.cached_input_tokens} cached), "
        f"{usage.output_tokens} out; cost {cost}{' (this run)' if sub_runs else ''}\n"
        f"{sub_runs}"
        f"Try:  {little} report {result.run_id}{where_flag}   (per-step tokens and dollars"
        f"{'; the sub-runs and the rolled-up total' if sub_runs else ''})\n"
        f"      {little} events {result.run_id}{where_flag}   (the event log)",
    )
    return 0


def _sub_runs_line(data_dir: str, run_id: str) -> str:
    """The run's sub-runs and the tokens and dollars of the whole tree (as ``little report``
    rolls them up), or ``""`` when it started none."""
    from little_dist.litellm_prices import litellm_price_fallback
    from little_dist.subruns import sub_run_rollup
    from little_dist.world.local import LocalWorld

    world = LocalWorld(data_dir)
    try:
        rollup = sub_run_rollup(world.list_events, run_id, pricing_fallback=litellm_price_fallback)
    finally:
        world.close()
    if rollup is None:
        return ""
    children = "".join(
        f"{'sub-runs:' if index == 0 else '':<10}{row.run_id}  {row.workflow_id} ({row.status})\n"
        for index, row in enumerate(rollup.rows)
    )
    total = rollup.total
    cost = "unpriced" if total.cost_usd is None else f"${total.cost_usd:.6f}"
    return (
        f"{children}"
        f"with sub-runs: {total.input_tokens} in ({total.cached_input_tokens} cached), "
        f"{total.output_tokens} out; cost {cost}\n"
    )


def _interruptible(call: Callable[[], RunResult]) -> RunResult:
    """``call()`` on a daemon thread, so Ctrl-C reaches this (main) thread at once instead
    of after the runner has waited for the steps in flight."""
    outcome: list[RunResult] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            outcome.append(call())
        except BaseException as error:  # handed to the main thread as it is
            failure.append(error)

    thread = threading.Thread(target=target, name="example-run", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.2)
    if failure:
        raise failure[0]
    return outcome[0]


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
