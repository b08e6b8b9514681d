"""The outer loop (upstream's Layer B, ``outer-loop.ts``): repeated compile-and-run cycles
under a supervisor.

Each cycle is a run of its own: the planner drafts a WorkflowVersion for the goal (shown
which cycle it is, what earlier cycles produced and the supervisor's last note), the run
executes it, and the supervisor reads every cycle so far and decides ``done`` (with the
loop's final output) or ``continue`` (with a note for the next plan), until ``done`` or
``max_outer_cycles``. The pieces:

* :mod:`.manifest` (pure): the per-loop manifest in upstream's shape and the resume checks
  (upstream's ``outer_loop_max_cycles_mismatch`` / ``outer_loop_goal_mismatch`` /
  ``outer_loop_manifest_corrupt``);
* :mod:`.decisions` (pure): the supervisor's decisions, ``OuterLoopCycleCompleted``'s
  payload, what the planner and the supervisor are shown;
* :mod:`.store`: where manifests are kept, every write a compare-and-set — upstream's file
  in a LocalWorld's data directory (atomic, locked), :mod:`.redis_s3` in a RedisS3World's
  Redis (mirrored to S3), memory for a MemoryWorld;
* :mod:`.supervisor`: supervisors; the default asks a model (and reports the call's tokens,
  recorded with its decision);
* :mod:`.loop`: :func:`run_outer_loop`, the driver, and its crash-resume rules;
* :mod:`.fleet`: cycles as fleet runs (``run_outer_loop(client=...)``): planned by a planner
  worker, run by the workers, waited for by the driver;
* :mod:`.report`: the loop's report (``little report ol_...``): each cycle's run and
  supervisor call, priced, and the loop's totals.

What is true on resume: the manifest says which cycles finished and which run was under way;
a cycle's ``OuterLoopCycleCompleted`` (on its run's log) says what the supervisor decided
for it. A process killed anywhere resumes without running a finished cycle again and
without asking the supervisor twice about a cycle whose decision was recorded.

Names are loaded on first use, so importing the pure modules (:mod:`.manifest`,
:mod:`.decisions`) does not drag in the runner, litellm or a storage client.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from little_dist.outer_loop.decisions import (
        CYCLE_COMPLETED,
        Continue,
        Decision,
        Done,
        Supervised,
        SupervisorCall,
        decision_from,
        outer_loop_context,
        supervise_state,
    )
    from little_dist.outer_loop.errors import OuterLoopError
    from little_dist.outer_loop.loop import run_outer_loop
    from little_dist.outer_loop.manifest import (
        CycleSummary,
        OuterLoopGoal,
        OuterLoopManifest,
        validate_outer_loop_id,
    )
    from little_dist.outer_loop.report import (
        OuterLoopReport,
        outer_loop_report,
    )
    from little_dist.outer_loop.store import (
        LocalManifestStore,
        ManifestConflictError,
        ManifestStore,
        MemoryManifestStore,
        StoredManifest,
        manifest_store_for,
    )
    from little_dist.outer_loop.supervisor import (
        SUPERVISOR_STEP_PATH,
        ModelSupervisor,
        Supervisor,
        SupervisorError,
    )

__all__ = [
    "CYCLE_COMPLETED",
    "SUPERVISOR_STEP_PATH",
    "Continue",
    "CycleSummary",
    "Decision",
    "Done",
    "LocalManifestStore",
    "ManifestConflictError",
    "ManifestStore",
    "MemoryManifestStore",
    "ModelSupervisor",
    "OuterLoopError",
    "OuterLoopGoal",
    "OuterLoopManifest",
    "OuterLoopReport",
    "StoredManifest",
    "Supervised",
    "Supervisor",
    "SupervisorCall",
    "SupervisorError",
    "decision_from",
    "manifest_store_for",
    "outer_loop_context",
    "outer_loop_report",
    "run_outer_loop",
    "supervise_state",
    "validate_outer_loop_id",
]

_WHERE = {
    "CYCLE_COMPLETED": "little_dist.outer_loop.decisions",
    "Continue": "little_dist.outer_loop.decisions",
    "Decision": "little_dist.outer_loop.decisions",
    "Done": "little_dist.outer_loop.decisions",
    "Supervised": "little_dist.outer_loop.decisions",
    "SupervisorCall": "little_dist.outer_loop.decisions",
    "OuterLoopReport": "little_dist.outer_loop.report",
    "outer_loop_report": "little_dist.outer_loop.report",
    "decision_from": "little_dist.outer_loop.decisions",
    "outer_loop_context": "little_dist.outer_loop.decisions",
    "supervise_state": "little_dist.outer_loop.decisions",
    "OuterLoopError": "little_dist.outer_loop.errors",
    "run_outer_loop": "little_dist.outer_loop.loop",
    "CycleSummary": "little_dist.outer_loop.manifest",
    "OuterLoopGoal": "little_dist.outer_loop.manifest",
    "OuterLoopManifest": "little_dist.outer_loop.manifest",
    "validate_outer_loop_id": "little_dist.outer_loop.manifest",
    "LocalManifestStore": "little_dist.outer_loop.store",
    "ManifestConflictError": "little_dist.outer_loop.store",
    "ManifestStore": "little_dist.outer_loop.store",
    "MemoryManifestStore": "little_dist.outer_loop.store",
    "StoredManifest": "little_dist.outer_loop.store",
    "manifest_store_for": "little_dist.outer_loop.store",
    "SUPERVISOR_STEP_PATH": "little_dist.outer_loop.supervisor",
    "ModelSupervisor": "little_dist.outer_loop.supervisor",
    "Supervisor": "little_dist.outer_loop.supervisor",
    "SupervisorError": "little_dist.outer_loop.supervisor",
}


def __getattr__(name: str) -> _typing.Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'little_dist.outer_loop' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
