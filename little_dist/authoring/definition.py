"""A defined workflow: :func:`define_workflow` and :class:`WorkflowDefinition` (upstream's
``defineWorkflow``), its identity (the snapshot the planner may see) and capabilities."""

from __future__ import annotations

import copy
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, TypeAdapter

from little_dist import run_limits
from little_dist.authoring.errors import InputValidationError
from little_dist.authoring.schemas import json_path, schema_of
from little_dist.authoring.slots import ModelSlot, as_slot, derive_slot_id, resolve_slots
from little_dist.canonical import canonical_json, sha256_digest
from little_dist.compiler import (
    ModelSlotSnapshot,
    PlannerConfigSnapshot,
    SkillIdentity,
    ToolIdentitySnapshot,
    WorkerConfigSnapshot,
    WorkflowDefinitionSnapshot,
    global_tools_hash,
    skills_hash,
)
from little_dist.errors import InvalidInputError
from little_dist.harness.types import DEFAULT_HARNESS_ID, SkillDescriptor
from little_dist.lazy import cached
from little_dist.limits import InputLimitError, InputLimits
from little_dist.mcp.config import McpServerConfig, mcp_servers
from little_dist.memory.layout import (
    MemoryConfig,
    MemoryMountSpec,
    memory_config,
    workflow_memory_mounts,
)
from little_dist.permissions import ToolPermissions, tool_permissions
from little_dist.sandbox.bash_capabilities import BashCapabilities, bash_capabilities
from little_dist.scheduling.fast_schema import compile_check
from little_dist.tools import Tool, ToolRegistry, tool

if TYPE_CHECKING:
    from little_dist.authoring.options import ReuseStrategy
    from little_dist.harness.types import Harness, HarnessRole
    from little_dist.runtime.capabilities import Capabilities

__all__ = ["DEFAULT_MAX_REVISIONS", "WorkflowDefinition", "define_workflow"]

#: Upstream's ``DEFAULT_MAX_WORKFLOW_REVISIONS``: planner drafts before the run fails.
DEFAULT_MAX_REVISIONS = 3
_WORKFLOW_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True, eq=False)
class WorkflowDefinition:
    """A defined workflow (see :func:`define_workflow`); immutable, hashable by identity.

    ``definition_hash()`` is upstream's ``workflowDefinitionHash`` of :meth:`snapshot`; it
    changes whenever anything the planner may see changes (description, schemas, models,
    tools, skills, planner system prompt or harness).
    """

    id: str
    description: str
    input_schema: Any
    output_schema: Any
    models: Mapping[str, ModelSlot]
    planner_slot_id: str
    planner_model: ModelSlot
    tools: ToolRegistry
    skills: tuple[SkillDescriptor, ...] = ()
    plan: Mapping[str, Any] | None = None
    harness: Harness | Mapping[HarnessRole, Harness] | None = None
    system: str | None = None
    max_revisions: int = DEFAULT_MAX_REVISIONS
    input_adapter: TypeAdapter[Any] | None = None
    output_adapter: TypeAdapter[Any] | None = None
    step_timeout: float | None = None
    bash: BashCapabilities | None = None
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    permissions: ToolPermissions = field(default_factory=ToolPermissions)
    mcp: tuple[McpServerConfig, ...] = ()
    #: The memory stores to mount instead of those ``memory`` names (an orchestrating
    #: session's: :func:`~little_dist.memory.layout.orchestrator_memory_mounts`).
    memory_mounts: tuple[MemoryMountSpec, ...] | None = None
    workflow_version_reuse_strategy: ReuseStrategy | None = None
    #: The dollar ceiling of each of its runs (:mod:`little_dist.budgets`); a run's own wins.
    budget_usd: float | None = None
    #: Upstream's run-level ``timeout`` (milliseconds) and ``maxAttempts`` for each of its
    #: runs (:mod:`little_dist.run_limits`); a run's own win.
    timeout_ms: int | None = None
    max_attempts: int | None = None

    def __repr__(self) -> str:
        return f"WorkflowDefinition(id={self.id!r})"

    # -- identity ---------------------------------------------------------------------------

    def _harness_id(self, role: HarnessRole) -> str:
        chosen: Any = self.harness
        if isinstance(chosen, Mapping):
            chosen = chosen.get(role)
        identifier = getattr(chosen, "harness_id", None) if chosen is not None else None
        return identifier if isinstance(identifier, str) and identifier else DEFAULT_HARNESS_ID

    def _slot_snapshot(self, slot_id: str, slot: ModelSlot) -> ModelSlotSnapshot:
        return ModelSlotSnapshot(
            id=slot_id,
            provider_id=slot.provider_id,
            model_id=slot.model_id,
            description=slot.description,
        )

    def skill_identities(self) -> list[SkillIdentity]:
        # A folder skill is upstream's {name, frontmatterHash}; a text skill is in the
        # prompt, so its body is part of what the model sees.
        return [
            SkillIdentity(
                name=item.name,
                frontmatter_hash=item.frontmatter_hash
                or sha256_digest(
                    {"name": item.name, "description": item.description, "body": item.body}
                ),
            )
            for item in self.skills
        ]

    def tool_snapshots(self) -> list[dict[str, Any]]:
        """Upstream's capability-manifest tool entries, sorted by name."""
        return [
            {
                "name": item.name,
                "scope": "global",
                "description": item.description,
                "inputSchema": item.input_schema,
                "descriptionHash": sha256_digest(item.description),
                "inputSchemaHash": sha256_digest(item.input_schema),
            }
            for item in self.tools
        ]

    def snapshot(self) -> WorkflowDefinitionSnapshot:
        """What the planner may see of this definition, in upstream's shape."""
        skills_digest = skills_hash(self.skill_identities())
        return WorkflowDefinitionSnapshot(
            id=self.id,
            description=self.description,
            input_schema_hash=sha256_digest(self.input_schema),
            output_schema_hash=sha256_digest(self.output_schema),
            model_slots=tuple(
                self._slot_snapshot(slot_id, slot) for slot_id, slot in self.models.items()
            ),
            planner_config=PlannerConfigSnapshot(
                model_slot_id=self.planner_slot_id,
                model_identity=self._slot_snapshot(self.planner_slot_id, self.planner_model),
                harness_id=self._harness_id("planner"),
                system_hash=sha256_digest(self.system),
                skills_hash=skills_digest,
            ),
            worker_config=WorkerConfigSnapshot(
                harness_id=self._harness_id("worker.ai-generate"), skills_hash=skills_digest
            ),
            global_tools=tuple(self.tools.names()),
            global_tools_hash=global_tools_hash(
                ToolIdentitySnapshot.for_tool(
                    item.name, description=item.description, input_schema=item.input_schema
                )
                for item in self.tools
            ),
            bash_config=self.bash_config().normalized(),
        )

    def bash_config(self) -> BashCapabilities:
        """The bash capabilities the planner sees (upstream's defaults when ``bash`` was not
        given: upstream's snapshot always holds them, so the hash does not say whether the
        tool is enabled)."""
        return self.bash if self.bash is not None else BashCapabilities()

    def definition_hash(self) -> str:
        """``sha256:<hex>`` of the canonical snapshot (upstream's workflowDefinitionHash)."""
        return self.snapshot().definition_hash()

    # -- inputs, outputs, capabilities --------------------------------------------------------

    @cached
    def _input_check(self) -> Callable[[Any], bool] | None:
        # Compiled once per definition: a batch of submissions checks every input.
        return compile_check(self.input_schema)

    def validate_input(self, value: Any, *, limits: InputLimits | None = None) -> Any:
        """The run input as JSON, checked against the input schema (before anything is
        written); raises :class:`InputValidationError` naming the offending fields, and
        :class:`~little_dist.limits.InputLimitError` for an input over ``limits``."""
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json", by_alias=True)
        try:
            text = canonical_json(value) if limits is None else limits.check_input(value)
            data = json.loads(text)
        except InputLimitError:
            raise
        except InvalidInputError as error:
            raise InputValidationError(self.id, [("input", str(error))]) from error
        quick = self._input_check
        if quick is not None and quick(data):
            return data  # (draft-07's answer, sooner; a "no" gets jsonschema's messages)
        import jsonschema

        validator = jsonschema.Draft7Validator(self.input_schema)
        problems = [
            (json_path(error.absolute_path), error.message)
            for error in sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
        ]
        if problems:
            raise InputValidationError(self.id, problems)
        return data

    def parse_output(self, value: Any) -> Any:
        """A run's output as the author's type (a model instance for a pydantic output)."""
        if self.output_adapter is None:
            return copy.deepcopy(value)
        return self.output_adapter.validate_python(value)

    def capabilities(
        self, harness: Harness | Mapping[HarnessRole, Harness] | None = None
    ) -> Capabilities:
        """What a run of this workflow may use: tools, model slots, skills, harnesses."""
        from little_dist.runtime.capabilities import Capabilities

        chosen = self.harness if harness is None else harness
        harnesses: dict[HarnessRole, Harness] = {}
        default: Harness | None = None
        if isinstance(chosen, Mapping):
            harnesses = dict(chosen)
        elif chosen is not None:
            default = chosen
        models = {slot_id: slot.resolved(slot_id) for slot_id, slot in self.models.items()}
        models.setdefault(self.planner_slot_id, self.planner_model.resolved(self.planner_slot_id))
        return Capabilities(
            tools=self.tools,
            models=models,
            harnesses=harnesses,
            skills=self.skills,
            default_harness=default,
            system=self.system,
            step_timeout=self.step_timeout,
            bash=self.bash,
            memory_mounts=(
                tuple(workflow_memory_mounts(self.id, self.memory))
                if self.memory_mounts is None
                else self.memory_mounts
            ),
            permissions=self.permissions or None,
        )


def _with_found_skills(
    declared: tuple[SkillDescriptor, ...],
    org: object,
    discover: Sequence[str],
    caller_file: object,
) -> tuple[SkillDescriptor, ...]:
    """The declared skills, then the org and discovered ones (upstream's precedence)."""
    from little_dist.authoring.slots import caller_dir
    from little_dist.skills import choose_skills, discover_skills, org_skills

    base = caller_dir(caller_file)
    org_dir = None
    if org is not None:
        if not isinstance(org, str | os.PathLike):
            raise InvalidInputError(f"org_skills must be a folder path, got {org!r}")
        org_dir = Path(org) if Path(org).is_absolute() else base / org
    if isinstance(discover, str) or not all(isinstance(item, str) for item in discover):
        raise InvalidInputError(f"discover_skills must be a list of folder names, got {discover!r}")
    return choose_skills(declared, org_skills(org_dir), discover_skills(base, list(discover)))


def _budget_usd(value: Any, where: str) -> float | None:
    from little_dist.budgets import budget_usd

    return budget_usd(value, where)


def _reuse_strategy(value: Any, where: str) -> ReuseStrategy | None:
    from little_dist.authoring.options import reuse_strategy

    return reuse_strategy(value, where)


# Long for its docstring (the public API's reference); the code is about 60 lines.
def _caller_file() -> object:
    """The file of the code that called :func:`define_workflow` (skill paths are relative to
    it), past the public wrapper of it in ``little_dist.api``."""
    frame: FrameType | None = sys._getframe(2)  # 0: here, 1: define_workflow, 2: its caller
    while frame is not None and frame.f_globals.get("__name__") == "little_dist.api":
        frame = frame.f_back
    return None if frame is None else frame.f_globals.get("__file__")


def define_workflow(
    *,
    id: str,
    description: str = "",
    input: Any = None,
    output: Any = None,
    model: str | ModelSlot | Sequence[str | ModelSlot],
    tools: Iterable[Tool | Callable[..., Any]] = (),
    skills: Iterable[SkillDescriptor] = (),
    plan: Mapping[str, Any] | None = None,
    harness: Harness | Mapping[HarnessRole, Harness] | None = None,
    planner_model: str | ModelSlot | None = None,
    system: str | None = None,
    max_revisions: int = DEFAULT_MAX_REVISIONS,
    step_timeout: float | None = None,
    bash: BashCapabilities | Mapping[str, Any] | None = None,
    memory: MemoryConfig | Mapping[str, Any] | None = None,
    permissions: ToolPermissions | Mapping[str, Any] | Sequence[Any] | None = None,
    mcp: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    org_skills: str | os.PathLike[str] | None = None,
    discover_skills: Sequence[str] = (),
    workflow_version_reuse_strategy: ReuseStrategy | None = None,
    budget_usd: float | None = None,
    timeout: str | float | None = None,
    max_attempts: int | None = None,
) -> WorkflowDefinition:
    """Define a workflow (upstream's ``defineWorkflow``).

    ``input``/``output``: a pydantic model, any type pydantic can describe (``list[Verdict]``,
    ``str``), or a JSON Schema (dict or bool); they must stay inside the LWIR schema subset.
    ``model``: a litellm model string, a :func:`model` slot, or several (the first is the
    default; the planner picks among them per step). ``planner_model`` defaults to the first.
    ``tools``: :class:`~little_dist.tools.Tool` objects or plain typed functions. ``skills``:
    :func:`skill` folders (``SKILL.md``) or texts given to every model. ``plan``: a fixed
    LWIR, used as is (no planner model call). ``harness``: one harness for every role, or a
    mapping role -> harness.
    ``system``: extra instructions for the planner. ``max_revisions``: planner drafts before
    giving up. ``step_timeout``: seconds one step attempt may run before it fails with
    causeCode ``timeout`` (default: ``LITTLE_STEP_TIMEOUT`` on the fleet, 900 s in process).
    ``bash``: upstream's bash capabilities (``network``, ``python``, ``javascript``; see
    :mod:`little_dist.sandbox.bash_capabilities`), part of the definition's hash; given (``{}`` for
    the defaults), it offers the sandboxed ``bash`` tool to the workflow's worker and fixer
    models (:mod:`little_dist.harness.bash_tool`).
    ``memory``: upstream's ``MemoryConfig`` (``workflow``: ``"rw"`` (default), ``"ro"`` or
    ``"none"``; ``org``: ``"ro"`` (default), ``"rw"`` or ``"none"``; ``attach``: ``[{"id":
    other_workflow, "mode": "ro"}]``): the memory stores the bash tool mounts under
    ``/mnt/memory/`` (:mod:`little_dist.memory`).
    ``permissions``: runtime tool-call rules (upstream's ``[{"tool": GLOB, "action":
    "allow"|"deny"|"ask"}]``, little-dist adds ``"args": {NAME: GLOB}``; see
    :mod:`little_dist.permissions`) deciding every tool call of every run, bash included; an
    ``ask`` goes to ``run_workflow(on_ask=...)`` and is denied without one (always on the
    fleet). Recorded in each session's manifest, not in the definition's hash (upstream
    keeps them out of it too).
    ``mcp``: MCP servers (upstream's ``{"servers": [{"id", "description", "transport":
    {"type": "stdio", "command", "args"?} | {"type": "http", "url"}}]}``, or the list of
    servers), offered to models through upstream's gateway tools ``mcp_list_tools`` and
    ``mcp_call_tool`` (registered tools; see :mod:`little_dist.mcp`); nothing connects until
    a session uses them.
    ``org_skills``: a folder of skill folders every role gets (a workflow skill of the same
    name wins); ``discover_skills``: folder names (``".agents/skills"``) searched for skills
    from this file's folder up to the git root, lowest precedence (:mod:`little_dist.skills`;
    relative paths are taken from the folder of the file that calls ``define_workflow``).
    ``workflow_version_reuse_strategy``: upstream's ``"planner_reviewed"`` (the default: a
    later run shows the planner the newest completed run's version, and the planner reuses it,
    adapts it or drafts afresh) or ``"always_fresh"`` (always a fresh draft); not part of the
    definition's hash (see :mod:`little_dist.planner.review`).
    ``budget_usd``: each run's dollar ceiling (a positive number; a run's own
    ``budget_usd`` wins): see :mod:`little_dist.budgets`.
    ``timeout`` and ``max_attempts``: upstream's run-level options for each run (a run's own
    win): a wall-clock cap (``'10m'``, ``'2h'``, or milliseconds, upstream's unit) past which
    the run fails with causeCode ``timeout``, and the attempts of a step that declares no
    ``retry`` of its own (default 1); see :mod:`little_dist.run_limits`.
    """
    if not isinstance(id, str) or not _WORKFLOW_ID.fullmatch(id):
        raise InvalidInputError(f"workflow id must match [A-Za-z0-9][A-Za-z0-9_.-]*, got {id!r}")
    if not isinstance(description, str):
        raise InvalidInputError(f"workflow {id!r}: description must be a string")
    if isinstance(max_revisions, bool) or not isinstance(max_revisions, int) or max_revisions < 1:
        raise InvalidInputError(f"workflow {id!r}: max_revisions must be a positive int")
    if step_timeout is not None and (
        isinstance(step_timeout, bool)
        or not isinstance(step_timeout, int | float)
        or not 0 < step_timeout < float("inf")
    ):
        raise InvalidInputError(
            f"workflow {id!r}: step_timeout must be a positive number of seconds, "
            f"got {step_timeout!r}"
        )
    input_schema, input_adapter = schema_of(input, "input")
    output_schema, output_adapter = schema_of(output, "output")
    if isinstance(model, str | ModelSlot):
        given: list[Any] = [model]
    elif isinstance(model, Sequence):
        given = list(model)
    else:
        raise InvalidInputError(
            f"workflow {id!r}: model must be a litellm model string, model(...) or a list of "
            f"them, got {type(model).__name__}"
        )
    if not given:
        raise InvalidInputError(f"workflow {id!r}: model is required")
    slots = resolve_slots([as_slot(item, "model") for item in given])
    if planner_model is None:
        planner_slot_id, planner_slot = next(iter(slots.items()))
    else:
        planner_slot = as_slot(planner_model, "planner_model")
        planner_slot_id = planner_slot.id or derive_slot_id(planner_slot, len(slots), set(slots))
    registry = ToolRegistry()
    for item in tools:
        registry.register(item if isinstance(item, Tool) else tool(item))
    servers = mcp_servers(mcp, f"workflow {id!r}: mcp")
    if servers:
        from little_dist.mcp.gateway import McpGateway, gateway_tools

        for gateway_tool in gateway_tools(McpGateway(servers)):
            if gateway_tool.name in registry:
                raise InvalidInputError(
                    f"workflow {id!r}: tool {gateway_tool.name!r} is already registered; "
                    "the MCP gateway needs that name"
                )
            registry.register(gateway_tool)
    skill_list = tuple(skills)
    for given_skill in skill_list:
        if not isinstance(given_skill, SkillDescriptor):
            kind = type(given_skill).__name__
            raise InvalidInputError(
                f"workflow {id!r}: skills must be made with skill(), got {kind}"
            )
    if org_skills is not None or discover_skills:
        skill_list = _with_found_skills(skill_list, org_skills, discover_skills, _caller_file())
    if plan is not None and not isinstance(plan, Mapping):
        raise InvalidInputError(f"workflow {id!r}: plan must be an LWIR document (a dict)")
    rules = tool_permissions(permissions, f"workflow {id!r}: permissions")
    if rules.on_ask is not None:
        raise InvalidInputError(
            f"workflow {id!r}: permissions take rules only here; pass the approver to "
            "run_workflow(on_ask=...) (a fleet worker has none: 'ask' is denied there)"
        )
    return WorkflowDefinition(
        id=id,
        description=description,
        input_schema=input_schema,
        output_schema=output_schema,
        models=slots,
        planner_slot_id=planner_slot_id,
        planner_model=planner_slot,
        tools=registry,
        skills=skill_list,
        plan=None if plan is None else json.loads(canonical_json(dict(plan))),
        harness=harness,
        system=system,
        max_revisions=max_revisions,
        input_adapter=input_adapter,
        output_adapter=output_adapter,
        step_timeout=None if step_timeout is None else float(step_timeout),
        bash=None if bash is None else bash_capabilities(bash, f"workflow {id!r}: bash"),
        memory=memory_config(memory, f"workflow {id!r}: memory"),
        permissions=rules,
        mcp=servers,
        workflow_version_reuse_strategy=_reuse_strategy(
            workflow_version_reuse_strategy, f"workflow {id!r}"
        ),
        budget_usd=_budget_usd(budget_usd, f"workflow {id!r}"),
        timeout_ms=run_limits.timeout_ms(timeout, f"workflow {id!r}"),
        max_attempts=run_limits.max_attempts(max_attempts, f"workflow {id!r}"),
    )
