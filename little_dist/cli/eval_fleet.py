"""``little eval run --fleet``: each case's input submitted to the fleet (as ``little submit``
submits a run) and waited for; at most ``--concurrency`` runs in flight. Eval sets and their
results stay in the local data directory (``--data-dir``); ``--world`` (or ``LITTLE_WORLD``)
names the fleet's world."""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["fleet_runner"]


@contextmanager
def fleet_runner(args: argparse.Namespace) -> Iterator[tuple[Callable[[Any], Any], Any]]:
    """``(run_case, the LWIR that will run or None)`` on the fleet; a client per thread
    (each waits on its own run), all closed at the end."""
    from little_dist.cli.submit_cmd import fleet_settings, resolve_workflow
    from little_dist.evals import CaseRun
    from little_dist.fleet.client import Client

    workflow = resolve_workflow(args.workflow)
    settings = fleet_settings(args)
    modules = list(args.app) or ([settings.app] if settings.app else [])
    registry = None
    if modules or isinstance(workflow, str):
        from little_dist.fleet.app_registry import load_registry

        registry = load_registry(modules)
    local = threading.local()
    clients: list[Client] = []
    lock = threading.Lock()

    def run_case(value: Any) -> CaseRun:
        client = getattr(local, "client", None)
        if client is None:
            client = Client(settings, registry=registry)
            local.client = client
            with lock:
                clients.append(client)
        run_id = client.submit(workflow, value)
        state = client.wait(run_id, timeout=args.fleet_timeout)
        steps = {
            path: step.output
            for path, step in state.steps.items()
            if step.status == "completed" and step.has_output
        }
        return CaseRun(
            state.run_id,
            state.status,
            output=state.output,
            step_outputs=steps,
            error=state.error,
            cost_usd=state.usage.model_dump(by_alias=True).get("costUsd"),
        )

    try:
        yield run_case, _lwir_of(workflow)
    finally:
        for client in clients:
            client.close()


def _lwir_of(workflow: Any) -> Any:
    from little_dist.authoring import WorkflowDefinition
    from little_dist.compiler import WorkflowVersion

    if isinstance(workflow, WorkflowDefinition):
        return workflow.plan
    if isinstance(workflow, WorkflowVersion):
        return workflow.lwir
    return workflow if isinstance(workflow, dict) else None
