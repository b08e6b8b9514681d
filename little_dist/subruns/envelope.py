"""What a model that called a workflow tool reads back: upstream's compact result envelope.

Upstream's harness hands the calling model ``{status, runId, outputSummary?, outputPath?}``
for a completed child (its ``output`` dropped: the summary is all the model reads) and, for
a child that failed or was cancelled, ``{status, runId, causeCode, message,
outputSummary?}`` (``compactWorkflowExecution`` in ``little-harness`` ``workflows.ts``): the
model reads why its child failed as a tool *result*, and decides what to do, instead of a
tool error. The keys are in upstream's order, so the envelope's JSON (compact separators)
is byte for byte what upstream's ``JSON.stringify`` makes of it. Code reads the whole
execution as upstream's ``asHarnessWorkflow`` returns it (:func:`completed_execution`).

The bounds on a session's workflow runs are upstream's ``workflowBudgets``:
``maxConcurrentWorkflowRuns`` (default 10) runs in flight, ``maxQueuedWorkflowRuns`` (default
100) waiting; one more fails with causeCode ``max_queued_workflow_runs`` and upstream's message
(``WorkflowQueueOverflowError``), before any run is started.
"""

from __future__ import annotations

import json
from typing import Any, Final

__all__ = [
    "DEFAULT_MAX_CONCURRENT_WORKFLOW_RUNS",
    "DEFAULT_MAX_QUEUED_WORKFLOW_RUNS",
    "MAX_WORKFLOW_OUTPUT_SUMMARY_CHARACTERS",
    "completed_envelope",
    "completed_execution",
    "failed_envelope",
    "failure_summary",
    "output_fits",
    "queue_overflow",
    "render_workflow_output",
    "summarize_workflow_output",
]

#: Upstream's cap on the summary handed back to the calling model.
MAX_WORKFLOW_OUTPUT_SUMMARY_CHARACTERS: Final = 4096
DEFAULT_MAX_CONCURRENT_WORKFLOW_RUNS: Final = 10
DEFAULT_MAX_QUEUED_WORKFLOW_RUNS: Final = 100
#: Upstream's messages for an ended run without one of its own, by status / cause.
_DEFAULT_MESSAGES: Final = {
    "cancelled": "Run was cancelled.",
    "timeout": "Run timed out.",
    "input_validation": "Input validation failed.",
}


def render_workflow_output(output: Any) -> str:
    """The output as upstream renders it for a model: a string as is, anything else as
    compact JSON (``JSON.stringify``), or ``str()`` of what JSON cannot hold."""
    if isinstance(output, str):
        return output
    try:
        return json.dumps(output, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return str(output)


def output_fits(output: Any, max_characters: int = MAX_WORKFLOW_OUTPUT_SUMMARY_CHARACTERS) -> bool:
    """Whether the rendered output fits the summary whole (in UTF-16 code units)."""
    return len(render_workflow_output(output).encode("utf-16-le")) // 2 <= max_characters


def summarize_workflow_output(
    output: Any, run_id: str, max_characters: int = MAX_WORKFLOW_OUTPUT_SUMMARY_CHARACTERS
) -> str:
    """The output as text for the calling model, bounded (upstream's
    ``summarizeWorkflowOutput``)."""
    text = render_workflow_output(output)
    # Lengths in UTF-16 code units, as JavaScript counts them (a character past U+FFFF is two).
    units = text.encode("utf-16-le")
    length = len(units) // 2
    if length <= max_characters:
        return text
    cut = max(0, max_characters)
    last = int.from_bytes(units[2 * cut - 2 : 2 * cut], "little") if cut else 0
    if 0xD800 <= last <= 0xDBFF:  # never split a surrogate pair
        cut -= 1
    head = units[: 2 * cut].decode("utf-16-le")
    return (
        f"{head}…[truncated: {cut} of {length} characters; "
        f"the full value is recorded in run {run_id}]"
    )


def failure_summary(
    run_id: str, failed_step_path: str | None, run_cause_code: str | None, message: str
) -> str | None:
    """Upstream's ``runFailureSummary``: the failed step and the run's own cause, when a step
    failed (``None`` otherwise: nothing beyond the message to say)."""
    if not failed_step_path:
        return None
    detail = message or "Workflow run failed."
    return summarize_workflow_output(
        f"Failed at step '{failed_step_path}' ({run_cause_code}): {detail}", run_id
    )


def completed_execution(run_id: str, output: Any) -> dict[str, Any]:
    """Upstream's ``HarnessCompletedWorkflowExecution`` as ``asHarnessWorkflow`` makes it:
    ``{protocolVersion, status, runId, output, summary}`` (our ``result="inline"``)."""
    return {
        "protocolVersion": 1,
        "status": "completed",
        "runId": run_id,
        "output": output,
        "summary": summarize_workflow_output(output, run_id),
    }


def completed_envelope(
    run_id: str, summary: str | None, output_path: str | None = None
) -> dict[str, Any]:
    """What upstream's ``compactWorkflowExecution`` hands the calling model for a completed
    run: ``{status, runId, outputSummary?, outputPath?}``, in that key order."""
    envelope: dict[str, Any] = {"status": "completed", "runId": run_id}
    if summary is not None:
        envelope["outputSummary"] = summary
    if output_path is not None:
        envelope["outputPath"] = output_path
    return envelope


def failed_envelope(
    *,
    status: str,
    run_id: str,
    cause_code: str,
    message: str | None,
    summary: str | None = None,
) -> dict[str, Any]:
    """The compact envelope of a child that ``failed`` or was ``cancelled``, in upstream's key
    order; ``outputSummary`` only when there is a summary."""
    text = message or _DEFAULT_MESSAGES.get(
        "cancelled" if status == "cancelled" else cause_code, "Workflow run failed."
    )
    envelope: dict[str, Any] = {
        "status": status,
        "runId": run_id,
        "causeCode": cause_code,
        "message": text,
    }
    if summary is not None:
        envelope["outputSummary"] = summary
    return envelope


def queue_overflow(
    run_id: str, active: int, queued: int, max_concurrent: int, max_queued: int
) -> dict[str, Any] | None:
    """The failed envelope of a call that would queue past ``max_queued`` while ``active``
    runs of its session run and ``queued`` wait (upstream's formula: ``max(0, queued + 1 -
    max(0, limit - active)) > maxQueued``), or ``None`` when it may run or wait."""
    limit = max(1, max_concurrent)
    queued_limit = max(0, max_queued)
    if max(0, queued + 1 - max(0, limit - active)) <= queued_limit:
        return None
    message = (
        f"Maximum queued workflow runs exceeded: maxQueuedWorkflowRuns is {queued_limit} "
        f"and {queued} workflow runs are already queued for this session. "
        "Wait for the runs in flight to finish before launching more, or raise the "
        "maxQueuedWorkflowRuns workflow budget."
    )
    return failed_envelope(
        status="failed", run_id=run_id, cause_code="max_queued_workflow_runs", message=message
    )
