"""An outer loop's cycles on the fleet: :func:`run_fleet_cycle`.

``run_outer_loop(..., client=Client(...))`` drives the loop from the calling process, and
each cycle's compile-and-run is a run of the fleet: submitted through the client with the
cycle's context (:meth:`~little_dist.fleet.client.Client.submit` ``cycle=``), planned by a
planner worker (the workflow must be in the workers' ``--app`` module, as for any run
submitted by id), its steps run by the workers, and followed by the client until it ends.
The calling process plans nothing and runs no step; what stays in it is what the loop
itself is: the manifest's compare-and-set writes (in the world's Redis) and the supervisor's
decision, appended to the ended cycle run as ``OuterLoopCycleCompleted``.

Why the driver is a client and not a run of its own: a loop is a handful of cycles, each a
whole run, and its only state (the manifest, the recorded decisions) is already durable
and compare-and-set, so any process can resume it by its id; the fleet already holds no
slot while the driver waits (the driver is not on a worker). Making the loop a fleet run
with the supervisor as a step would need a run whose step starts a planned run per cycle
and suspends on it (a planned sub-run, which the fleet does not start yet) for no new
guarantee.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from little_dist.authoring.definition import WorkflowDefinition
from little_dist.authoring.results import RunResult, run_result

if TYPE_CHECKING:
    from little_dist.fleet.client import Client

__all__ = ["cycle_submission", "run_fleet_cycle"]


def cycle_submission(
    outer_loop_id: str, outer_loop: Mapping[str, Any], prompt_note: str | None
) -> dict[str, Any]:
    """What a cycle's submission records for the fleet's planner (``cycle=``)."""
    fields: dict[str, Any] = {"outerLoopId": outer_loop_id, "outerLoop": dict(outer_loop)}
    if prompt_note is not None:
        fields["promptNote"] = prompt_note
    return fields


def run_fleet_cycle(
    client: Client,
    workflow: WorkflowDefinition,
    run_input: Any,
    *,
    run_id: str,
    outer_loop_id: str,
    outer_loop: Mapping[str, Any],
    prompt_note: str | None,
    timeout: float | None = None,
    budget_usd: float | None = None,
) -> RunResult:
    """Submit the cycle's run (idempotent on ``run_id``: a resumed cycle finds its run, an
    ended one is not planned or run again) and wait for its end; its result, or
    :class:`~little_dist.authoring.errors.RunFailedError` as
    :func:`~little_dist.in_process.run_workflow_cycle` raises it. ``timeout``:
    :meth:`~little_dist.fleet.client.Client.wait`'s; ``budget_usd``: the cycle run's dollar
    ceiling (what its loop has left)."""
    client.submit(
        workflow,
        run_input,
        run_id=run_id,
        cycle=cycle_submission(outer_loop_id, outer_loop, prompt_note),
        budget_usd=budget_usd,
    )
    state = client.wait(run_id, timeout=timeout)
    return run_result(workflow, run_id, state)
