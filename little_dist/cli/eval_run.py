"""``little eval run``: each case's input through ``little run``'s machinery (the same
workflow loading, checks and embedded runner, one world), a bounded number at once; then the
table or the JSON result, stored beside the set for the next run to compare with."""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import sys
import time
from typing import Any

from little_dist.cli.eval_load import LoadedEvalSet

__all__ = ["run_eval_set"]


def run_eval_set(args: argparse.Namespace, loaded: LoadedEvalSet) -> int:
    from little_dist.evals import cases_of, compare, run_cases

    bundle = loaded.version.bundle
    cases = cases_of(bundle, loaded.bodies, args.role)
    if args.gate_split is not None or args.seal_key is not None:
        split = _gate_split(args, bundle, cases)
        if isinstance(split, int):
            return split
        cases = split
    if not cases:
        roles = ", ".join(args.role or [])
        print(f"little eval: {loaded.label}: no items with role {roles}", file=sys.stderr)
        return 1
    before = loaded.store_.last_run(loaded.version.id)
    reusable = None
    if args.affected_only and before is not None:
        reusable = {case["itemSha"]: case for case in before.get("cases", [])}
    from little_dist.cli.eval_judge import judge_for

    judge = judge_for(
        args, bundle, [case.body for case in cases], slots=lambda: _workflow_slots(args)
    )
    started = time.time()
    if args.fleet:
        from little_dist.cli.eval_fleet import fleet_runner

        with contextlib.ExitStack() as stack:
            try:
                run_case, lwir = stack.enter_context(fleet_runner(args))
            except Exception as exc:  # (what is wrong with --workflow or the fleet settings)
                from little_dist.cli.run_problems import one_line
                from little_dist.redaction import redact

                print(f"little eval: --workflow: {one_line(redact(str(exc)))}", file=sys.stderr)
                return 2
            result = run_cases(
                cases,
                run_case,
                concurrency=args.concurrency,
                lwir=lwir,
                reusable=reusable,
                judge=judge,
            )
    else:
        check = _prepare_check(args)
        if check is not None:
            return check
        lwir = _lwir_that_runs(args, cases[0].body["input"].get("value"))
        result = run_cases(
            cases,
            lambda value: _run_one(args, value),
            concurrency=args.concurrency,
            lwir=lwir,
            reusable=reusable,
            judge=judge,
        )
    from little_dist.evals.judge import judge_events

    events = judge_events(result["cases"])
    for case in result["cases"]:  # (the calls are kept once: as the run's events)
        for sample in case["samples"]:
            sample.pop("judgeCalls", None)
    document: dict[str, Any] = {
        "evalRunId": f"evrun_{secrets.token_hex(8)}",
        "evalSetId": loaded.version.id,
        "evalSetSha": loaded.version.hash,
        "workflow": args.workflow,
        "ranAt": _stamp(started),
        **result,
        "events": events,
    }
    previous = compare(document, before)
    if previous is not None:
        document["previous"] = previous
    loaded.store_.put_run(loaded.version.id, f"{time.time_ns():020d}", document)
    if args.json:
        print(json.dumps(document, ensure_ascii=False))
    else:
        from little_dist.cli.eval_table import render

        print(render(document))
    summary = document["summary"]
    return 0 if summary["passed"] == summary["cases"] else 1


def _gate_split(args: argparse.Namespace, bundle: Any, cases: list[Any]) -> list[Any] | int:
    """The gate cases in the ``--gate-split`` part of the sealed split, computed with the
    key (the bundle stores only role ``gate``), or the exit code after saying why not."""
    from little_dist.evals import is_sealed, seal_key_id

    if args.gate_split is None or args.seal_key is None:
        print("little eval: --gate-split and --seal-key go together", file=sys.stderr)
        return 2
    try:
        with open(args.seal_key, "rb") as handle:
            key = handle.read(1 << 16).rstrip(b"\r\n")
    except OSError as exc:
        print(f"little eval: --seal-key: {args.seal_key}: {exc.strerror}", file=sys.stderr)
        return 2
    policy = bundle["manifest"]["sealPolicy"]
    if not key or seal_key_id(key) != policy["sealKeyId"]:
        print(
            f"little eval: --seal-key: {args.seal_key} is not the key this set's gate split is "
            f"sealed with (its id is not {policy['sealKeyId']})",
            file=sys.stderr,
        )
        return 1
    wanted = args.gate_split == "sealed"
    return [
        case
        for case in cases
        if case.role == "gate"
        and is_sealed(key, policy["domain"], case.item_sha, policy["cutoff"]) == wanted
    ]


def _prepare_check(args: argparse.Namespace) -> int | None:
    """The workflow is loaded once before any case runs, so a bad workflow is one message,
    not one per case."""
    from little_dist.cli.run_problems import InvalidWorkflowOrInput, UsageProblem, one_line
    from little_dist.cli.run_target import workflow_folder

    try:
        workflow_folder(args.workflow)
    except UsageProblem as exc:
        print(f"little eval: --workflow: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except InvalidWorkflowOrInput as exc:
        print(f"little eval: --workflow: {one_line(str(exc))}", file=sys.stderr)
        return 1
    return None


def _lwir_that_runs(args: argparse.Namespace, value: Any) -> Any:
    """The LWIR the workflow will run, when it is known before running (a fixed plan, an
    LWIR file, a compiled version; not a planner's draft): its steps' input cones are hashed."""
    from little_dist.cli.run_problems import InvalidWorkflowOrInput, UsageProblem
    from little_dist.cli.run_target import prepare

    try:
        resolve, _, _ = prepare(_case_args(args, value))
    except (UsageProblem, InvalidWorkflowOrInput):
        return None  # (that case's own run says what is wrong)
    checked = getattr(resolve, "checked", None)
    return getattr(checked, "lwir", checked)


def _case_args(args: argparse.Namespace, value: Any) -> argparse.Namespace:
    return argparse.Namespace(
        workflow=args.workflow,
        input=json.dumps(value),
        run_id=None,
        app=list(args.app),
        json=False,
        quiet=True,
        max_workers=8,
        budget_usd=None,
        lease_ttl=None,
        max_branches=None,
        run_timeout=args.run_timeout,
        world=args.world,
        data_dir=args.data_dir,
    )


def _run_one(args: argparse.Namespace, value: Any) -> Any:
    from little_dist.cli.run_cmd import run_to_state
    from little_dist.evals import CaseRun

    case_args = _case_args(args, value)
    from little_dist.cli.run_problems import InvalidWorkflowOrInput, UsageProblem, one_line
    from little_dist.cli.run_target import prepare

    try:  # (what is wrong with this case's input is this case's error, said once)
        prepare(case_args)
    except (UsageProblem, InvalidWorkflowOrInput) as exc:
        lines = getattr(exc, "lines", [])
        return CaseRun(None, "failed", error=one_line(" ".join([str(exc), *lines])))
    code, state = run_to_state(case_args)
    if state is None:
        return CaseRun(None, "failed", error=f"the run did not start (exit code {code})")
    steps = {
        path: step.output
        for path, step in state.steps.items()
        if step.status == "completed" and step.has_output
    }
    cost = state.usage.model_dump(by_alias=True).get("costUsd")
    return CaseRun(
        state.run_id,
        state.status,
        output=state.output,
        step_outputs=steps,
        error=state.error,
        cost_usd=cost,
    )


def _workflow_slots(args: argparse.Namespace) -> dict[str, str]:
    """The evaluated workflow's model slots that are priced as another model (litellm model
    -> pricing key), when it is a definition (a folder, ``module:attr``)."""
    from little_dist.authoring import WorkflowDefinition
    from little_dist.cli.submit_cmd import resolve_workflow

    try:
        workflow = resolve_workflow(args.workflow)
    except Exception:  # (what is wrong with it is said by its runs)
        return {}
    if not isinstance(workflow, WorkflowDefinition):
        return {}
    return {s.litellm_model: s.pricing for s in workflow.models.values() if s.pricing}


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
