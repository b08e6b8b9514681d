"""Replay: what a run already did and what must run again, read from its event log alone.

Upstream's ``replayRun``. A pure function of the events and an artifact reader: it calls no
model and no tool, writes nothing, and returns the same plan every time.

- Steps are listed in the order the log first mentions their ``stepPath`` (not dict or
  numeric order: ``"10"`` before ``"2"`` if that is how they appeared).
- ``should_run`` is ``status != "completed"``: a step whose StepCompleted is committed is
  never run again, whatever else the log says about it.
- With an artifact reader, every artifact the run recorded is read back (and must belong to
  the run, else :class:`~little_dist.world.base.ArtifactNotFoundError`), and a completed
  step that recorded only an ``outputRef`` gets its output rehydrated from that artifact.
- An empty log is :class:`~little_dist.world.base.RunNotFoundError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from little_dist.run_state import (
    EventLike,
    RunState,
    RunStateEventMismatchError,
    StepState,
    StepStatus,
    materialize_run_state,
    step_paths_in_event_order,
)
from little_dist.world.base import (
    ArtifactManifest,
    ArtifactNotFoundError,
    ArtifactRead,
    RunNotFoundError,
    World,
)

__all__ = [
    "ArtifactReader",
    "HydratedArtifact",
    "ReplayPlan",
    "ReplayPlanStep",
    "RunStateEventMismatchError",
    "replay_run",
    "replay_run_from_world",
]

ArtifactReader = Callable[[str], ArtifactRead]
"""Reads an ``artifact://`` ref (``World.get_artifact`` has this shape)."""


@dataclass(frozen=True)
class ReplayPlanStep:
    """One step of the plan: its status, whether it must run again, what it produced.

    ``has_output`` tells a recorded ``None`` from no output at all. ``output_rehydrated``
    says the output was read from ``output_ref`` because the event carried only the ref.
    """

    step_path: str
    status: StepStatus
    should_run: bool
    artifact_refs: tuple[str, ...]
    output_ref: str | None = None
    has_output: bool = False
    output: Any = None
    output_rehydrated: bool = False

    def to_json(self) -> dict[str, Any]:
        """Upstream's ``ReplayPlanStep`` (``output``/``outputRef`` only when present)."""
        data: dict[str, Any] = {
            "stepPath": self.step_path,
            "status": self.status,
            "shouldRun": self.should_run,
            "artifactRefs": list(self.artifact_refs),
        }
        if self.has_output:
            data["output"] = self.output
        if self.output_ref is not None:
            data["outputRef"] = self.output_ref
        return data


@dataclass(frozen=True)
class HydratedArtifact:
    """An artifact of the run, read back: its ref, manifest and decoded payload."""

    ref: str
    manifest: ArtifactManifest
    payload: Any

    def to_json(self) -> dict[str, Any]:
        return {"ref": self.ref, "manifest": self.manifest.to_json(), "payload": self.payload}


@dataclass(frozen=True)
class ReplayPlan:
    """Upstream's ``ReplayResult``: the folded state plus the per-step plan."""

    run_id: str
    events: tuple[EventLike, ...]
    state: RunState
    steps: tuple[ReplayPlanStep, ...]
    completed_step_paths: tuple[str, ...]
    pending_step_paths: tuple[str, ...]
    artifacts: tuple[HydratedArtifact, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The plan's JSON: ``steps``, ``completedStepPaths``, ``pendingStepPaths``, plus
        ``runId``, ``state`` and ``artifacts`` (events are left out; list them instead)."""
        return {
            "runId": self.run_id,
            "state": self.state.to_json(),
            "steps": [step.to_json() for step in self.steps],
            "completedStepPaths": list(self.completed_step_paths),
            "pendingStepPaths": list(self.pending_step_paths),
            "artifacts": [artifact.to_json() for artifact in self.artifacts],
        }


def _plan_step(step: StepState, hydrated: dict[str, HydratedArtifact]) -> ReplayPlanStep:
    has_output = step.has_output
    output = step.output
    rehydrated = False
    ref = step.output_ref
    if step.status == "completed" and not has_output and ref is not None and ref in hydrated:
        has_output, output, rehydrated = True, hydrated[ref].payload, True
    return ReplayPlanStep(
        step_path=step.step_path,
        status=step.status,
        should_run=step.status != "completed",
        artifact_refs=step.artifact_refs,
        output_ref=ref,
        has_output=has_output,
        output=output,
        output_rehydrated=rehydrated,
    )


def _hydrate(run_id: str, refs: Iterable[str], read: ArtifactReader) -> list[HydratedArtifact]:
    artifacts: list[HydratedArtifact] = []
    for ref in refs:
        read_back = read(ref)
        # An artifact of another run is treated as missing, never silently replayed.
        if read_back.manifest.run_id != run_id:
            raise ArtifactNotFoundError(ref)
        artifacts.append(HydratedArtifact(ref, read_back.manifest, read_back.payload))
    return artifacts


def replay_run(
    events: Iterable[EventLike],
    *,
    run_id: str | None = None,
    read_artifact: ArtifactReader | None = None,
) -> ReplayPlan:
    """Plan the replay of one run from its events (sequences 1..N).

    ``run_id`` defaults to the first event's. Raises ``RunNotFoundError`` for an empty log
    and :class:`RunStateEventMismatchError` for a log with a gap, a duplicate or a foreign
    event. Without ``read_artifact`` no artifact is read and ``artifacts`` is empty.
    """
    logged = tuple(events)
    if not logged:
        raise RunNotFoundError(run_id if run_id is not None else "(empty event log)")
    state = materialize_run_state(logged, run_id=run_id)
    steps_by_path = state.steps
    ordered = [path for path in step_paths_in_event_order(logged) if path in steps_by_path]
    listed = set(ordered)
    ordered.extend(path for path in steps_by_path if path not in listed)

    hydrated: list[HydratedArtifact] = []
    if read_artifact is not None:
        hydrated = _hydrate(state.run_id, state.artifacts, read_artifact)
    by_ref = {artifact.ref: artifact for artifact in hydrated}
    plan_steps = tuple(_plan_step(steps_by_path[path], by_ref) for path in ordered)
    return ReplayPlan(
        run_id=state.run_id,
        events=logged,
        state=state,
        steps=plan_steps,
        completed_step_paths=tuple(s.step_path for s in plan_steps if not s.should_run),
        pending_step_paths=tuple(s.step_path for s in plan_steps if s.should_run),
        artifacts=tuple(hydrated),
    )


def replay_run_from_world(world: World, run_id: str) -> ReplayPlan:
    """:func:`replay_run` over the run's events in ``world``, reading its artifacts."""
    events = world.list_events(run_id)
    if not events:
        raise RunNotFoundError(run_id)
    return replay_run(
        events, run_id=run_id, read_artifact=lambda ref: world.get_artifact(ref, run_id=run_id)
    )
