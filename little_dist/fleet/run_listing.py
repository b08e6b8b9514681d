"""The runs a world holds, newest first: :func:`list_runs` (``little runs``, ``Client.runs``
and the HTTP API's ``GET /v1/runs``).

Cheap on purpose: each run costs its first and last events
(:meth:`~little_dist.world.base.World.first_and_last_events`), which give its workflow,
status, start and end; only the runs listed are read further, for their model calls' usage
(the cost) and, for a run started from a bare LWIR document, its version's name. Runs sort by
their first event's ``recordedAt``, then run id, newest first; ``before`` (a listed run's
``(startedAt, runId)``) continues a listing after that run.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Collection
from typing import Any

from little_dist.events import USAGE_EVENT_TYPES, Event
from little_dist.fleet.versions import BINDING_FIELD, workflow_name_of_part
from little_dist.pricing import PriceFallback
from little_dist.report.model import calls_usage
from little_dist.report.runs import RunSummary, summarize_run, workflow_hint
from little_dist.world.base import VersionNotFoundError, World

__all__ = ["list_runs", "run_workflow", "workflow_of_run"]


def run_workflow(world: World, first: Event) -> str | None:
    """The workflow id of the run whose log starts with ``first``: the one its submission
    names, else its version's name (``None``: neither is known)."""
    hint, version = workflow_hint(first)
    if hint is not None or version is None:
        return hint
    try:
        metadata = world.get_version(version).get("lwir", {}).get("metadata", {})
    except VersionNotFoundError:  # a fleet submit stores a shared part and a binding
        metadata = {"name": workflow_name_of_part(world, first.payload.get(BINDING_FIELD))}
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) else version


def workflow_of_run(world: World, run_id: str) -> str | None:
    """The workflow id of run ``run_id`` (``None``: no such run, or none known)."""
    bounds = world.first_and_last_events(run_id)
    return None if bounds is None else run_workflow(world, bounds[0])


def list_runs(
    world: World,
    *,
    status: str | None = None,
    workflow: str | None = None,
    limit: int = 0,
    before: tuple[str, str] | None = None,
    pricing_fallback: PriceFallback | None = None,
    workflows: Collection[str] | None = None,
) -> list[RunSummary]:
    """The runs of ``world``, newest first: with ``status``, of workflows whose id matches
    the glob ``workflow`` (and is one of ``workflows``, when given: an API token's), at
    most ``limit`` (0: all), older than ``before``."""
    names: dict[str, str | None] = {}  # version id -> its workflow's name

    def name_of(version_id: str, binding: object) -> str | None:
        if version_id not in names:
            try:
                metadata = world.get_version(version_id).get("lwir", {}).get("metadata", {})
            except VersionNotFoundError:  # a fleet submit stores a shared part and a binding
                metadata = {"name": workflow_name_of_part(world, binding)}
            name = metadata.get("name") if isinstance(metadata, dict) else None
            names[version_id] = name if isinstance(name, str) else version_id
        return names[version_id]

    found: list[tuple[RunSummary, str | None, object]] = []
    for run_id in world.list_run_ids():
        bounds = world.first_and_last_events(run_id)
        if bounds is None:
            continue
        hint, version = workflow_hint(bounds[0])
        summary = summarize_run(*bounds, workflow=hint)
        if status is not None and summary.status != status:
            continue
        if before is not None and (summary.started_at, summary.run_id) >= before:
            continue
        found.append((summary, version, bounds[0].payload.get(BINDING_FIELD)))
    found.sort(key=lambda item: (item[0].started_at, item[0].run_id), reverse=True)
    shown: list[RunSummary] = []
    for summary, version, binding in found:
        if summary.workflow is None and version is not None:
            summary = _with(summary, workflow=name_of(version, binding))
        if workflow is not None and not fnmatch.fnmatchcase(summary.workflow or "", workflow):
            continue
        if workflows is not None and summary.workflow not in workflows:
            continue
        calls = [
            event
            for event in world.list_events_partly(summary.run_id, after=0, decode=USAGE_EVENT_TYPES)
            if event.type in USAGE_EVENT_TYPES
        ]
        # Only an ended run can have a late record (one S3 list call on the fleet).
        late = world.late_events(summary.run_id) if summary.status != "running" else []
        usage = calls_usage([*calls, *late], fallback=pricing_fallback)
        shown.append(_with(summary, cost_usd=usage.cost_usd))
        if limit and len(shown) >= limit:
            break
    return shown


def _with(summary: RunSummary, **changes: Any) -> RunSummary:
    return dataclasses.replace(summary, **changes)
