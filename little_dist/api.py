"""The public entry point that runs a workflow: :func:`run_workflow` (upstream's
``runWorkflow``), and the public :func:`define_workflow`, whose definitions run themselves
(``workflow.run(input, **options)``, the same call).

It sits above everything it can drive: it checks its arguments once (the run options into
one :class:`~little_dist.authoring.options.RunOptions`, the outer loop's), then hands the
run to the in-process engine (:mod:`little_dist.in_process`) or, with
``max_outer_cycles > 1``, to an outer loop (:mod:`little_dist.outer_loop`). A run on a fleet
is :class:`~little_dist.Client`'s; an outer loop on a fleet is
``run_outer_loop(..., client=...)``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec

from little_dist.authoring.definition import WorkflowDefinition
from little_dist.authoring.definition import define_workflow as _define_workflow
from little_dist.authoring.options import ReuseStrategy, RunOptions
from little_dist.authoring.results import RunResult
from little_dist.errors import InvalidInputError
from little_dist.litellm_prices import litellm_price_fallback
from little_dist.pricing import PriceFallback

if TYPE_CHECKING:
    from little_dist.harness.types import Harness, HarnessRole
    from little_dist.limits import InputLimits
    from little_dist.permissions import Approver, ToolPermissions
    from little_dist.world.base import World

__all__ = ["Workflow", "define_workflow", "run_workflow"]

_P = ParamSpec("_P")


class Workflow(WorkflowDefinition):
    """A definition made with the public :func:`define_workflow`: one that can run itself.
    The authoring layer's :class:`~little_dist.authoring.definition.WorkflowDefinition` runs
    nothing (a layer below every engine); this adds only :meth:`run`."""

    def run(self, input: Any, **options: Any) -> RunResult:
        """``run_workflow(self, input, **options)`` (:func:`run_workflow`)."""
        return run_workflow(self, input, **options)

    @classmethod
    def of(cls, definition: WorkflowDefinition) -> Workflow:
        """``definition`` as a :class:`Workflow` (the same fields; itself if it is one)."""
        if isinstance(definition, cls):
            return definition
        fields = {f.name: getattr(definition, f.name) for f in dataclasses.fields(definition)}
        return cls(**fields)


def _runnable(make: Callable[_P, WorkflowDefinition]) -> Callable[_P, Workflow]:
    @functools.wraps(make)
    def define(*args: _P.args, **kwargs: _P.kwargs) -> Workflow:
        return Workflow.of(make(*args, **kwargs))

    return define


#: :func:`little_dist.authoring.definition.define_workflow`, whose definition can run itself
#: (:class:`Workflow`); the same parameters.
define_workflow = _runnable(_define_workflow)


# Long for its docstring (the public API's reference); the code is about 35 lines.
def run_workflow(
    workflow: WorkflowDefinition,
    input: Any,
    *,
    world: World | None = None,
    run_id: str | None = None,
    harness: Harness | Mapping[HarnessRole, Harness] | None = None,
    max_workers: int = 8,
    progress: Callable[[Any], None] | None = None,
    limits: InputLimits | None = None,
    pricing_fallback: PriceFallback | None = litellm_price_fallback,
    parent: Mapping[str, Any] | None = None,
    permissions: ToolPermissions | Mapping[str, Any] | Sequence[Any] | None = None,
    on_ask: Approver | None = None,
    max_outer_cycles: int | None = None,
    outer_loop_id: str | None = None,
    supervise: Callable[[Mapping[str, Any]], Any] | None = None,
    workflow_version_reuse_strategy: ReuseStrategy | None = None,
    budget_usd: float | None = None,
    timeout: str | float | None = None,
    max_attempts: int | None = None,
    deadline: Any = None,
    cancel: Any = None,
) -> RunResult:
    """Plan (or take ``plan=``), compile and run ``workflow`` on ``input`` in this process.

    ``world`` defaults to ``LocalWorld(".little-workflow")``. ``input`` is validated against
    the input schema before anything is written, and against ``limits`` (default: the
    ``LITTLE_MAX_*`` settings, see :mod:`little_dist.limits`). A ``run_id`` that already
    finished returns its recorded result without calling any model or tool; one that stopped
    part way resumes. Raises :class:`RunFailedError` when the run fails.
    ``pricing_fallback`` prices the model calls in ``result.usage`` that the bundled
    registry has no rates for (default: litellm's cost map; ``None``: registry rates only).
    ``parent``: a sub-run's link to the run that started it, recorded in its ``RunStarted``
    (see :mod:`little_dist.subruns`; a workflow tool passes it).
    ``permissions``: upstream's runtime tool-call rules for this run (a list of rules, or
    ``{"ruleset": [...], "onAsk": fn}``), added after the workflow's own
    (``define_workflow(permissions=...)``; a deny anywhere wins). ``on_ask``: upstream's
    ``onAsk``, the approver of ``ask`` decisions: called in this process with
    ``{"tool": name, "args": args}``, true allows the call; without one an ``ask`` is denied.
    ``max_outer_cycles`` above 1 (upstream's ``maxOuterCycles``): an outer loop of up to that
    many planned-and-run cycles under ``supervise`` (:func:`~little_dist.run_outer_loop`,
    which ``outer_loop_id`` resumes); ``run_id`` and ``parent`` are then not taken. An outer
    loop whose cycles run on a fleet is ``run_outer_loop(..., client=Client(...))``.
    ``workflow_version_reuse_strategy``: upstream's call option, ``"planner_reviewed"`` or
    ``"always_fresh"``, over the workflow's (``define_workflow``'s; default planner-reviewed);
    checked with an outer loop too (whose cycles' planner reviews no earlier version).

    ``budget_usd``: the run's dollar ceiling (over the workflow's): a model call whose
    worst-case cost would pass it is not sent, and the run fails with ``budget_exceeded``
    (see :mod:`little_dist.budgets`).

    ``timeout`` and ``max_attempts``: upstream's (over the workflow's): a wall-clock cap
    (``'10m'``, ``'2h'``, or milliseconds, upstream's unit) past which the run fails with
    causeCode ``timeout``, and the attempts of a step with no ``retry`` of its own.
    ``deadline``: when the run must end at the latest (a timezone-aware ``datetime``, a
    ``timedelta`` or ``'10m'`` from now, an ISO 8601 time); past it the run fails with
    causeCode ``deadline_exceeded``. Both are recorded in the run's log when it starts
    (``little.run.limits``): a resumed run keeps them. ``cancel``: upstream's ``signal``, a
    :class:`~little_dist.CancelToken` (or ``threading.Event``); once set from any thread,
    the run fails with causeCode ``cancelled``, its model call in flight not waited for.
    An interrupt (Ctrl-C) is not a cancel: the run stays open and the same ``run_id``
    resumes it. See :mod:`little_dist.run_limits`.

    Every option is checked before anything runs: a bad one is an
    :class:`~little_dist.errors.InvalidInputError` naming it.
    """
    if not isinstance(workflow, WorkflowDefinition):
        raise InvalidInputError(
            f"run_workflow expects a workflow from define_workflow(), got {type(workflow).__name__}"
        )
    options = RunOptions.of(
        f"run_workflow({workflow.id!r})",
        harness=harness,
        max_workers=max_workers,
        progress=progress,
        limits=limits,
        pricing_fallback=pricing_fallback,
        permissions=permissions,
        on_ask=on_ask,
        workflow_version_reuse_strategy=workflow_version_reuse_strategy,
        budget_usd=budget_usd,
        timeout=timeout,
        max_attempts=max_attempts,
        deadline=deadline,
        cancel=cancel,
    )
    if max_outer_cycles is not None:
        if (
            isinstance(max_outer_cycles, bool)
            or not isinstance(max_outer_cycles, int)
            or (max_outer_cycles < 1)
        ):
            raise InvalidInputError(
                "run_workflow: max_outer_cycles must be a positive integer >= 1 "
                f"(got {max_outer_cycles!r})."
            )
        if max_outer_cycles > 1:
            if run_id is not None or parent is not None:
                raise InvalidInputError(
                    "run_workflow: an outer loop (max_outer_cycles > 1) gives each cycle a run "
                    "of its own; pass outer_loop_id, not run_id or parent"
                )
            from little_dist.outer_loop.loop import drive_outer_loop

            return drive_outer_loop(
                workflow,
                input,
                options,
                max_outer_cycles=max_outer_cycles,
                supervise=supervise,
                world=world,
                outer_loop_id=outer_loop_id,
            )
    if outer_loop_id is not None or supervise is not None:
        raise InvalidInputError(
            "run_workflow: outer_loop_id and supervise need max_outer_cycles > 1"
        )
    from little_dist.in_process import run_in_process

    return run_in_process(workflow, input, options, world=world, run_id=run_id, parent=parent)
