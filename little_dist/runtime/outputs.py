"""Step outputs: how they are committed (inline or by reference) and read back.

Inline or by reference. Upstream writes every step output to an artifact and also inlines it
in ``StepCompleted``. We inline small outputs only (canonical JSON up to
:data:`INLINE_OUTPUT_LIMIT` bytes, 64 KiB): no artifact, no ``ArtifactCreated``, which saves
a file write and an event per step. A larger output goes to ``world.put_artifact`` and the
events carry ``outputRef`` and no inline ``output``, so event logs (Redis streams in the
fleet) stay small. Readers that need the value (the runner's fold, a worker resolving a
step's input) hydrate such events with :func:`hydrate_events`, which reads the artifact and
hands the fold an envelope whose payload carries ``output`` again — the log is unchanged.

Exception: the steps inside a parallel branch always get their artifact (and, when small,
their inline output too, exactly as upstream), because the fan-in envelope of a branch
exposes ``outputRef`` and upstream-authored fan-in schemas require it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from little_dist import occurrences
from little_dist.canonical import canonical_json
from little_dist.events import Event, EventInput
from little_dist.run_state import EventLike
from little_dist.scheduling.schema_checks import compiled_schema
from little_dist.world.artifacts import artifact_ref_for
from little_dist.world.base import ArtifactInput, World

__all__ = [
    "INLINE_OUTPUT_LIMIT",
    "completion_events",
    "hydrate_events",
    "schema_problems",
]

INLINE_OUTPUT_LIMIT: Final = 64 * 1024


def schema_problems(schema: Mapping[str, Any], value: Any) -> list[str]:
    """``"/where: what"`` for each way ``value`` fails the JSON Schema (empty when valid)."""
    compiled = compiled_schema(schema)
    if compiled.accepts_quickly(value):
        return []  # (the validator's answer, sooner; a "no" gets jsonschema's messages)
    problems = []
    for error in sorted(
        compiled.validator.iter_errors(value), key=lambda e: [str(p) for p in e.path]
    ):
        where = "/".join(str(part) for part in error.absolute_path)
        problems.append(f"{'/' + where if where else '(root)'}: {error.message}")
    return problems


def completion_events(
    world: World,
    *,
    run_id: str,
    step: Mapping[str, Any],
    step_path: str,
    attempt: int,
    output: Any,
    artifact_refs: Sequence[str] = (),
    schema_hash: str | None = None,
    inline_limit: int = INLINE_OUTPUT_LIMIT,
    always_artifact: bool = False,
    stage: list[ArtifactInput] | None = None,
) -> list[EventInput]:
    """``[ArtifactCreated], StepOutputValidated, StepCompleted`` for a validated output.

    The artifact (large outputs only) is written here, before any event names it.
    ``schema_hash`` is upstream's ``stepOutputSchemaHash`` of the step's output contract.
    ``always_artifact`` writes the artifact whatever the size and inlines a small output
    too, as upstream does for every step (see the module docstring for when). ``stage``:
    such a small artifact is not written here but added to ``stage``, for the caller to
    write with the events (``World.append_batch_with_artifacts``: one round trip).
    """
    step_id = step.get("id")
    uses = step.get("uses")
    spec = step.get("output")
    mode = spec.get("mode") if isinstance(spec, Mapping) else None
    end = occurrences.attempt_ended(step_path, attempt)
    events: list[EventInput] = []
    validated: dict[str, Any] = {"stepPath": step_path}
    completed: dict[str, Any] = {
        "stepPath": step_path,
        "stepId": step_id,
        "attempt": attempt,
        "attemptId": f"attempt_{attempt}",
    }
    refs = list(artifact_refs)
    large = len(canonical_json(output)) > inline_limit
    if large or always_artifact:
        created = _output_artifact(
            world, run_id, step_path, attempt, output, stage=None if large else stage
        )
        events.append(created)
        ref = created.payload["artifactRef"]
        validated["outputRef"] = ref
        completed["outputRef"] = ref
        refs.insert(0, ref)
    if not large:
        completed["output"] = output
    if mode is not None:
        validated["outputMode"] = mode
    if schema_hash is not None:
        validated["schemaHash"] = schema_hash
    if refs:
        completed["artifactRefs"] = refs
    metadata: dict[str, Any] = {"uses": uses}
    if mode is not None:
        metadata["outputMode"] = mode
    completed["metadata"] = metadata
    events.append(
        EventInput(
            type="StepOutputValidated",
            occurrence_id=occurrences.output_validated(step_path, attempt),
            payload=validated,
        )
    )
    events.append(EventInput(type="StepCompleted", occurrence_id=end, payload=completed))
    return events


def _output_artifact(
    world: World,
    run_id: str,
    step_path: str,
    attempt: int,
    output: Any,
    *,
    stage: list[ArtifactInput] | None,
) -> EventInput:
    """The ``ArtifactCreated`` of the attempt's output artifact, written now or (``stage``)
    added to ``stage`` for the caller to write with the events."""
    artifact = ArtifactInput(run_id=run_id, name="output", payload=output, step_path=step_path)
    if stage is not None:
        ref, content_type = artifact_ref_for(artifact), artifact.content_type
        stage.append(artifact)
    else:
        manifest = world.put_artifact(artifact)
        ref, content_type = manifest.artifact_ref, manifest.content_type
    return EventInput(
        type="ArtifactCreated",
        occurrence_id=occurrences.output_artifact(step_path, attempt),
        payload={
            "stepPath": step_path,
            "artifactRef": ref,
            "name": "output",
            "contentType": content_type,
        },
    )


def hydrate_events(world: World, events: Iterable[EventLike]) -> list[EventLike]:
    """``events`` (events or envelopes) with the output of every by-reference
    ``StepCompleted`` read back in.

    Events and envelopes that need nothing are passed through as they are (no copy).
    """
    hydrated: list[EventLike] = []
    for event in events:
        event_type: Any
        payload: Any
        if isinstance(event, Event):
            event_type, payload = event.type, event.payload
        else:  # an envelope
            event_type, payload = event.get("type"), event.get("payload")
        if (
            event_type == "StepCompleted"
            and isinstance(payload, Mapping)
            and "output" not in payload
            and isinstance(payload.get("outputRef"), str)
        ):
            run_id = event.run_id if isinstance(event, Event) else event.get("runId")
            read = world.get_artifact(
                payload["outputRef"], run_id=run_id if isinstance(run_id, str) else None
            )
            value = read.payload
            envelope = event.to_json() if isinstance(event, Event) else dict(event)
            envelope["payload"] = {**payload, "output": value}
            hydrated.append(envelope)
        else:
            hydrated.append(event)
    return hydrated
