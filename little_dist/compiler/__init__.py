"""The compiler: LWIR -> locked, content-addressed WorkflowVersion (pure; no IO).

* :func:`compile_lwir` validates an LWIR document and locks it, either to a
  :class:`CompileRequest` (the planner path) or with upstream's direct-LWIR recipe for a run
  input, returning a :class:`WorkflowVersion` whose ids and hashes equal upstream's.
* :mod:`little_dist.compiler.lock` holds the hash chain itself (validation hash, lock seed,
  compiled version identity) and the input structure recorded in the lock.
* :class:`WorkflowDefinitionSnapshot` is what ``define_workflow`` hashes into the
  ``workflowDefinitionHash``.
"""

from __future__ import annotations

from little_dist.compiler.definition import (
    MemoryAttachment,
    MemoryConfigSnapshot,
    ModelSlotSnapshot,
    PlannerConfigSnapshot,
    SkillIdentity,
    ToolIdentitySnapshot,
    WorkerConfigSnapshot,
    WorkflowDefinitionSnapshot,
    global_tools_hash,
    skills_hash,
)
from little_dist.compiler.lock import (
    CANONICALIZER,
    compiled_version_identity,
    compiler_validation_hash,
    concrete_input_structure,
    lwir_version_id_for_hash,
    workflow_version_id_for_hash,
)
from little_dist.compiler.request import CompileRequest
from little_dist.compiler.version import (
    LwirInvalidError,
    WorkflowVersion,
    WorkflowVersionMismatchError,
    compile_lwir,
    register_lwir,
)
from little_dist.lwir import code_file_digest

__all__ = [
    "CANONICALIZER",
    "CompileRequest",
    "LwirInvalidError",
    "MemoryAttachment",
    "MemoryConfigSnapshot",
    "ModelSlotSnapshot",
    "PlannerConfigSnapshot",
    "SkillIdentity",
    "ToolIdentitySnapshot",
    "WorkerConfigSnapshot",
    "WorkflowDefinitionSnapshot",
    "WorkflowVersion",
    "WorkflowVersionMismatchError",
    "code_file_digest",
    "compile_lwir",
    "compiled_version_identity",
    "compiler_validation_hash",
    "concrete_input_structure",
    "global_tools_hash",
    "lwir_version_id_for_hash",
    "register_lwir",
    "skills_hash",
    "workflow_version_id_for_hash",
]
