"""``little.submit_run`` on a worker: a run submitted by workflow id (or LWIR document) from
any Celery client, its refusals recorded for the sender (see :mod:`~.refusals` and
docs/operations.md, "Submitting by name")."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from little_dist.errors import InvalidInputError, LittleError
from little_dist.world.extras import extras_of

if TYPE_CHECKING:
    from little_dist.fleet.worker import WorkerRuntime

__all__ = ["submit"]

_log = logging.getLogger("little_dist.fleet.worker")


def submit(
    runtime: WorkerRuntime,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    task_id: str | None,
) -> str:
    """``little.submit_run`` with the message's ``args`` and ``kwargs``: submit a run of a
    registered workflow (by id) or of an LWIR document; its run id (given, or derived
    from ``task_id``: see :mod:`~.refusals`).

    A submission its checks refuse (its arguments, run id, workflow id, input, document,
    the capabilities it names, a run id taken by another run) writes nothing of a run:
    the refusal is recorded for its sender (by ``task_id``, and under the run id when
    that is nobody's run) and raised as :class:`~.refusals.SubmissionRefused`, which the
    task declares expected (FAILURE, one log line, no retry). An accepted one is
    answered by ``task_id`` too (its run id), and removes a refusal an earlier one left
    under the run id."""
    from little_dist.fleet.refusals import (
        SubmissionRefused,
        cause_of,
        given_run_id,
        run_id_for,
        submit_arguments,
    )
    from little_dist.fleet.submission import submit_run
    from little_dist.local_runner import new_run_id

    run_id: str | None = None
    try:
        run_id = run_id_for(given_run_id(args, kwargs), task_id, new_run_id)
        sent = submit_arguments(args, kwargs)
        registry = runtime.registry
        if sent.workflow_id is not None and registry.get(sent.workflow_id) is None:
            known = ", ".join(sorted(registry.workflows)) or "none"
            raise SubmissionRefused(
                "unknown_workflow",
                f"workflow {sent.workflow_id!r} is not one of the workers' app "
                f"(registered: {known})",
            )
        submitted = submit_run(
            runtime.world,
            sent.workflow,
            sent.input,
            run_id=run_id,
            queue=runtime.queue,
            settings=runtime.settings,
            registry=registry,
            holder=runtime.name,
            window=runtime.window,
            shared=runtime.shared_redis,
            budget_usd=sent.budget_usd,
            limits=sent.limits,
            callback_url=sent.callback_url,
        )
    except InvalidInputError as error:
        message = error.message if isinstance(error, SubmissionRefused) else str(error)
        refused = SubmissionRefused(cause_of(error), message, run_id)
        _record_refusal(runtime, task_id, refused)
        raise refused from None
    records = extras_of(runtime.world).submission_records
    if records is not None:
        records.record_acceptance(task_id, submitted)
    return submitted


def _record_refusal(runtime: WorkerRuntime, task_id: str | None, refused: Any) -> None:
    """Tell the sender (see :func:`submit`); storage out of reach leaves the log line."""
    records = extras_of(runtime.world).submission_records
    if records is None:
        return
    try:
        records.record_refusal(task_id, refused.run_id, refused.cause, refused.message)
    except LittleError as error:
        _log.warning("little.submit_run %s: refusal not recorded: %s", task_id, error)
