"""The planner: a workflow definition and an input -> a registered WorkflowVersion.

Upstream's compile pipeline (``compiler.ts``, ``planner-reuse.ts``,
``workflow-version-reuse.ts``; docs ``foundations/planner-lifecycle.mdx``):

1. **Review.** With upstream's ``planner_reviewed`` reuse strategy (the default; the other
   is ``always_fresh``), the newest completed run of the same workflow id is a candidate:
   the planner is shown its brief (upstream's text, step graph and warnings) and may reply
   ``reuse_unchanged`` (the candidate runs; no draft), ``adapt`` or ``draft_fresh`` (an LWIR
   that goes on through step 2), or a plain LWIR. A decision is checked with upstream's rules
   (a refused one goes back to the planner as a finding) and recorded as
   ``PlannerReuseDecisionRecorded`` (:mod:`little_dist.planner.review`). The brief names the
   candidate's files, ``/planner/reuse/<id>/lwir.json`` and five siblings; they are written
   read-only (:mod:`little_dist.planner.reuse_files`) and the planner is offered upstream's
   ``bash`` over them (sandboxed, no network, a throw-away ``/mnt/scratch/own`` as its
   working folder): the default planner then loops, up to 25 model turns, running the
   commands its model asks for (recorded as ``harness.tool_call.*`` and
   ``harness.runtime.command.*`` of step path ``planner``, replayed on resume) until it
   answers; a custom planner harness finds the tool in ``ctx.tools``.
2. **Draft -> validate -> repair.** Otherwise the planner harness (role ``planner``, task
   ``plan``) drafts an LWIR: the default one asks the planner model for one JSON object.
   Each draft is validated (``validate_lwir`` plus upstream's request binding: name,
   schemas, model slots and tools must match the definition); the findings go back to the
   planner, one line each, until a draft is valid or ``max_revisions`` drafts were made.
   Upstream's deterministic floor follows: a workflow without tools gets the obvious
   single ``ai.generate`` step. A fixed ``plan=`` is the only draft (no model call).
3. **Register.** The valid LWIR is compiled against the request (the lock binds the
   definition hash and the planned input), stored in the world and indexed under the
   definition hash.

Everything is recorded on the run before ``RunStarted``: ``OrchestrationRequested``,
``PlannerStarted``, the planner's session (run through the harness registry as every role's
is: ``harness.session.started`` with its manifest -- model slot and digest, skills, harness
id, the request's ids -- then ``.completed`` or ``.failed``, step path ``planner``, attempt =
revision) and its ``harness.model.*`` calls, ``PlannerDraftedWorkflow``,
``WorkflowValidationFailed`` | ``WorkflowValidationSucceeded``, ``PlannerReuseDecisionRecorded``
when the planner decided on a candidate; the runner then records ``WorkflowVersionRegistered``.
Every event has an occurrence id and recorded drafts and model replies are reused, so a
planning session that crashed resumes without paying for a draft twice. When no valid
draft comes, the run fails with causeCode ``planner_validation_exhausted``.
"""

from __future__ import annotations

from little_dist.planner.binding import binding_findings
from little_dist.planner.harnesses import DefaultPlanner, PlannerError
from little_dist.planner.prompts import planning_context, synthesize_simple_lwir
from little_dist.planner.request import (
    PLANNER_STEP_TYPES,
    OrchestrationRequest,
    orchestration_request,
)
from little_dist.planner.reuse import input_structure_compatible
from little_dist.planner.session import resolve_version

__all__ = [
    "PLANNER_STEP_TYPES",
    "DefaultPlanner",
    "OrchestrationRequest",
    "PlannerError",
    "binding_findings",
    "input_structure_compatible",
    "orchestration_request",
    "planning_context",
    "resolve_version",
    "synthesize_simple_lwir",
]
