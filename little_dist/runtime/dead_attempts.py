"""Fail the attempts of workers that died, so that ``decide`` retries them.

An attempt is *running* from its ``StepAttemptStarted`` until its ``StepCompleted`` or
``StepFailed``. Its worker holds the step's lease (:func:`step_lease_key`) and heartbeats
it; when the worker dies the lease expires. :func:`sweep_dead_attempts` takes each such free
lease and appends ``StepFailed{causeCode: "lease_expired", retriable: true}`` fenced with
it (occurrence ``end:{path}:{n}``, the attempt's one ending), so a worker that was only
slow, not dead, cannot commit afterwards. ``decide`` retries these without consuming the
step's retry budget; the harness memo makes the retry free of repeated side effects.

Only worker steps (``ai.generate``, ``tool.call``, ``code.run``) hold leases: ``parallel``
and ``decision`` steps are driven by ``decide`` itself and are never swept.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field

from little_dist import occurrences
from little_dist.compiler import WorkflowVersion
from little_dist.errors import LeaseLostError
from little_dist.events import EventInput
from little_dist.run_state import RunState
from little_dist.runtime.failures import CAUSE_LEASE_EXPIRED, error_envelope
from little_dist.scheduling.context import StepPathError, locate_step
from little_dist.scheduling.step_graph import plan_for
from little_dist.world.base import World
from little_dist.world.fleet_keys import step_lease_key

__all__ = [
    "WORKER_STEP_KINDS",
    "SweepResult",
    "running_worker_attempts",
    "sweep_dead_attempts",
]

WORKER_STEP_KINDS = frozenset({"ai.generate", "tool.call", "code.run"})

# The sweeper holds a step lease only for one append.
_SWEEP_TTL = 10.0


@dataclass
class SweepResult:
    """``failed``: attempts marked ``lease_expired``; ``held``: running ones still leased;
    ``ended``: ones whose end was recorded after the state the sweep looked at (their worker
    committed as the sweep took the free lease: nothing to fail)."""

    failed: list[tuple[str, int]] = field(default_factory=list)
    held: list[tuple[str, int]] = field(default_factory=list)
    ended: list[tuple[str, int]] = field(default_factory=list)


def running_worker_attempts(
    version: WorkflowVersion, state: RunState
) -> list[tuple[str, int, str]]:
    """``(step_path, attempt, step_id)`` of every running attempt of a worker step."""
    plan = plan_for(version)
    running: list[tuple[str, int, str]] = []
    for path, step_state in state.steps.items():
        if step_state.status != "running":
            continue
        attempts = step_state.attempts
        if attempts and attempts[-1].status != "running":
            continue  # (suspended: it ended waiting for sub-runs, no worker holds it)
        try:
            step = locate_step(plan, path).step
        except StepPathError:
            continue
        if step.uses in WORKER_STEP_KINDS:
            running.append((path, len(step_state.attempts), step.id))
    return running


def sweep_dead_attempts(
    world: World,
    state: RunState,
    *,
    version: WorkflowVersion,
    holder: str,
    skip: Container[tuple[str, int]] = (),
) -> SweepResult:
    """Fail every running worker attempt whose lease is free; see the module docstring.

    ``skip`` holds ``(step_path, attempt)`` pairs the caller itself is running.
    """
    result = SweepResult()
    run_id = state.run_id
    for path, attempt, step_id in running_worker_attempts(version, state):
        if (path, attempt) in skip:
            continue
        lease = world.acquire_lease(step_lease_key(run_id, path), holder, _SWEEP_TTL)
        if lease is None:
            result.held.append((path, attempt))
            continue
        try:
            error = error_envelope(
                name="LeaseExpiredError",
                message=f"the worker running attempt {attempt} of {path} stopped "
                "(its lease expired)",
                cause_code=CAUSE_LEASE_EXPIRED,
                retriable=True,
            )
            recorded = world.append(
                run_id,
                EventInput(
                    type="StepFailed",
                    occurrence_id=occurrences.attempt_ended(path, attempt),
                    payload={
                        "stepPath": path,
                        "stepId": step_id,
                        "attempt": attempt,
                        "attemptId": f"attempt_{attempt}",
                        "error": error,
                    },
                ),
                fence=lease.fence,
            )
            # The end's id is the commit's too: an attempt that committed meanwhile keeps
            # its StepCompleted (or its own StepFailed), and the append recorded nothing.
            if recorded.type == "StepFailed" and recorded.payload.get("error") == error:
                result.failed.append((path, attempt))
            else:
                result.ended.append((path, attempt))
        except LeaseLostError:
            result.held.append((path, attempt))
        finally:
            world.release_lease(lease)
    return result
