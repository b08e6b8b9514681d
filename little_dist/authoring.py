"""The authoring front door: ``define_workflow``, ``model``, ``skill`` and ``run_workflow``.

Upstream's ``defineWorkflow`` / ``runWorkflow`` (``authoring.ts``) in Python::

    triage = define_workflow(
        id="support.triage",
        description="Classify a ticket and draft a reply.",
        input=Ticket,                       # a pydantic model, a type, or a JSON Schema
        output=Reply,
        model=model("openai/gpt-4o-mini", id="fast"),   # or just "openai/gpt-4o-mini"
        tools=[lookup_customer],            # Tools or plain typed functions
        skills=[skill("tone", "House style", "Be brief and kind.")],
    )
    result = run_workflow(triage, {"accountId": "A1", "message": "..."})
    result.output          # a Reply instance (validated)
    result.usage.cost_usd  # dollars, or None when nothing could be priced

Without ``plan=`` the planner (:mod:`little_dist.planner`) designs the LWIR with the model,
validates it and registers the version; a later run of the same definition reuses that
version. With ``plan=`` the given LWIR is used as is (no model call). Either way the run
executes on :func:`little_dist.local_runner.run_version` in this process.

A run id that already finished returns its recorded result (no model or tool is called
again); a run id that stopped part way resumes where its log ends.
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, TypeAdapter

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
from little_dist.errors import InvalidInputError, LittleError
from little_dist.harness.types import DEFAULT_HARNESS_ID, ResolvedModel, SkillDescriptor
from little_dist.lwir.findings import Finding
from little_dist.lwir.schema import validate_schema_value
from little_dist.pricing import UsageTotals
from little_dist.tools import Tool, ToolRegistry, tool

if TYPE_CHECKING:
    from little_dist.harness.types import Harness, HarnessRole
    from little_dist.run_state import RunState
    from little_dist.runtime.capabilities import Capabilities
    from little_dist.world.base import World

__all__ = [
    "DEFAULT_MAX_REVISIONS",
    "InputValidationError",
    "ModelSlot",
    "RunFailedError",
    "RunResult",
    "WorkflowDefinition",
    "define_workflow",
    "model",
    "run_workflow",
    "skill",
]

#: Upstream's ``DEFAULT_MAX_WORKFLOW_REVISIONS``: planner drafts before the run fails.
DEFAULT_MAX_REVISIONS = 3
_WORKFLOW_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_BASH_CONFIG: dict[str, Any] = {"enabled": False}


class InputValidationError(InvalidInputError):
    """A run input that does not match the workflow's input schema.

    ``problems`` lists ``(path, message)`` pairs, paths rooted at ``input``.
    """

    def __init__(self, workflow_id: str, problems: list[tuple[str, str]]) -> None:
        self.workflow_id = workflow_id
        self.problems = problems
        details = "; ".join(f"{path}: {message}" for path, message in problems)
        super().__init__(f"workflow {workflow_id!r}: invalid input: {details}")


class RunFailedError(LittleError):
    """A run ended with ``RunFailed`` (upstream's ``RunFailedError``).

    ``cause_code`` is upstream's (``step_failed``, ``max_visits_exceeded``,
    ``planner_validation_exhausted``, ...); ``error`` is the recorded error envelope and
    ``result`` the failed run's :class:`RunResult` (its ``state`` has every step).
    """

    def __init__(
        self,
        message: str,
        *,
        run_id: str,
        workflow_version_id: str,
        cause_code: str,
        error: Mapping[str, Any],
        failed_step_path: str | None = None,
        result: RunResult | None = None,
    ) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.workflow_version_id = workflow_version_id
        self.cause_code = cause_code
        self.error = dict(error)
        self.failed_step_path = failed_step_path
        self.result = result


# -- model slots and skills -----------------------------------------------------------------

_SLOT_SANITIZE = (
    (re.compile(r"[/.:_\s]+"), "-"),
    (re.compile(r"[^a-z0-9-]+"), ""),
    (re.compile(r"-+"), "-"),
)
# Upstream's suffixes for slot ids that would otherwise collide (``model-slots.ts``).
_ANIMALS = tuple(
    " ".join(
        (
            "tiger panda wolf bear fox owl hawk deer lynx moose otter raven shark whale lion",
            "eagle swan crane seal puma yak ibex elk boar hare stoat marten ocelot leopard",
            "cheetah jaguar gazelle antelope bison buffalo camel llama alpaca ox kestrel merlin",
            "falcon kite harrier osprey vulture condor salmon trout carp tuna marlin barracuda",
            "manta ray dolphin narwhal beluga orca porpoise octopus squid nautilus",
        )
    ).split(" ")
)


@dataclass(frozen=True)
class ModelSlot:
    """A model the workflow may use: a litellm model string behind a slot id.

    ``id`` is what LWIR steps name in ``with.model`` (derived from the model name when not
    given, as upstream derives it). ``pricing`` is the registry key the calls are priced
    under (``"openai/gpt-4o-mini"``); it defaults to the litellm model, so a scripted model
    (``scripted/demo``) reports dollars only when given one. ``settings`` are extra
    ``litellm.completion`` keyword arguments (``temperature``, ...).
    """

    litellm_model: str
    id: str | None = None
    description: str = ""
    pricing: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)

    @property
    def provider_id(self) -> str:
        provider, _, name = self.litellm_model.partition("/")
        return provider if name else "openai"

    @property
    def model_id(self) -> str:
        provider, _, name = self.litellm_model.partition("/")
        return name or provider

    def resolved(self, slot_id: str) -> ResolvedModel:
        """The runtime binding of this slot under ``slot_id``."""
        return ResolvedModel(
            slot_id=slot_id,
            litellm_model=self.litellm_model,
            pricing_key=self.pricing or "",
            settings=dict(self.settings),
        )


def model(
    litellm_model: str,
    *,
    id: str | None = None,
    description: str = "",
    pricing: str | None = None,
    **settings: Any,
) -> ModelSlot:
    """A model slot: ``model("openai/gpt-4o-mini", id="fast", temperature=0)``."""
    if not isinstance(litellm_model, str) or not litellm_model.strip():
        raise InvalidInputError(f"model() needs a litellm model string, got {litellm_model!r}")
    if id is not None and (not isinstance(id, str) or not id):
        raise InvalidInputError(f"model slot id must be a non-empty string, got {id!r}")
    return ModelSlot(litellm_model, id, description, pricing, dict(settings))


def skill(name: str, description: str, body: str = "") -> SkillDescriptor:
    """A text skill: its name and description (and body) go into the model's prompt."""
    for label, value in (("name", name), ("description", description)):
        if not isinstance(value, str) or not value.strip():
            raise InvalidInputError(f"skill {label} must be a non-empty string, got {value!r}")
    if not isinstance(body, str):
        raise InvalidInputError(f"skill {name!r}: body must be a string")
    return SkillDescriptor(name=name, description=description, body=body)


def _derive_slot_id(slot: ModelSlot, index: int, taken: set[str]) -> str:
    base = slot.model_id.lower()
    for pattern, replacement in _SLOT_SANITIZE:
        base = pattern.sub(replacement, base)
    base = base.strip("-") or f"model-{index}"
    if base not in taken:
        return base
    digest = sha256_digest(f"{slot.provider_id}:{slot.model_id}:{slot.description}")
    start = int(digest[7:15], 16) % len(_ANIMALS)
    for offset in range(len(_ANIMALS)):
        candidate = f"{base}-{_ANIMALS[(start + offset) % len(_ANIMALS)]}"
        if candidate not in taken:
            return candidate
    raise InvalidInputError(f"Cannot derive a unique slot id for {base!r}: too many duplicates.")


def _resolve_slots(slots: Sequence[ModelSlot]) -> dict[str, ModelSlot]:
    explicit: set[str] = set()
    for slot in slots:
        if slot.id is not None:
            if slot.id in explicit:
                raise InvalidInputError(f"Slot id {slot.id!r} is already in use.")
            explicit.add(slot.id)
    resolved: dict[str, ModelSlot] = {}
    taken = set(explicit)
    for index, slot in enumerate(slots):
        slot_id = slot.id if slot.id is not None else _derive_slot_id(slot, index, taken)
        taken.add(slot_id)
        resolved[slot_id] = slot
    return resolved


def _as_slot(value: str | ModelSlot, what: str) -> ModelSlot:
    if isinstance(value, ModelSlot):
        return value
    if isinstance(value, str):
        return model(value)
    raise InvalidInputError(
        f"{what} must be a litellm model string or model(...), got {type(value).__name__}"
    )


# -- schemas --------------------------------------------------------------------------------


def _inline_refs(node: Any, defs: Mapping[str, Any], seen: tuple[str, ...]) -> Any:
    """pydantic's schema without ``$ref``/``$defs``, ``title`` or ``default``: the LWIR
    schema subset has none of them."""
    if isinstance(node, list):
        return [_inline_refs(item, defs, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if name in seen:
            raise InvalidInputError(
                f"schema: recursive model {name!r} cannot be expressed in the LWIR schema subset"
            )
        target = _inline_refs(defs.get(name, {}), defs, (*seen, name))
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        return {**target, **_inline_refs(siblings, defs, seen)}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("$defs", "definitions", "default"):
            continue
        if key == "title" and not isinstance(value, dict):
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {name: _inline_refs(sub, defs, seen) for name, sub in value.items()}
        elif key in ("enum", "const", "required", "examples"):
            out[key] = value
        else:
            out[key] = _inline_refs(value, defs, seen)
    return out


def _check_schema(schema: Any, what: str) -> None:
    findings: list[Finding] = []
    validate_schema_value(schema, f"$.{what}", findings)
    if findings:
        details = "; ".join(f"{finding.path}: {finding.message}" for finding in findings)
        raise InvalidInputError(f"{what} is outside the LWIR schema subset: {details}")


def _schema_of(value: Any, what: str) -> tuple[Any, TypeAdapter[Any] | None]:
    """``(JSON Schema, adapter)`` of a schema-like value; the adapter is ``None`` for a plain
    JSON Schema (a dict or a bool) and parses results into Python objects otherwise."""
    if value is None:
        return True, None
    if isinstance(value, bool):
        return value, None
    if isinstance(value, Mapping):
        try:
            schema = json.loads(canonical_json(dict(value)))
        except InvalidInputError as error:
            raise InvalidInputError(f"{what}: {error}") from error
        _check_schema(schema, what)
        return schema, None
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(value)
        raw = adapter.json_schema(mode="validation")
    except Exception as error:
        raise InvalidInputError(
            f"{what}: expected a pydantic model, a type or a JSON Schema, got {value!r} ({error})"
        ) from error
    schema = _inline_refs(raw, raw.get("$defs", {}), ())
    _check_schema(schema, what)
    return schema, adapter


def _json_path(parts: Iterable[Any]) -> str:
    path = "input"
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


# -- the definition -------------------------------------------------------------------------


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
        # Our skills are text in the prompt, so the body is part of what the model sees.
        return [
            SkillIdentity(
                name=item.name,
                frontmatter_hash=sha256_digest(
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
            bash_config=dict(_BASH_CONFIG),
        )

    def definition_hash(self) -> str:
        """``sha256:<hex>`` of the canonical snapshot (upstream's workflowDefinitionHash)."""
        return self.snapshot().definition_hash()

    # -- inputs, outputs, capabilities --------------------------------------------------------

    def validate_input(self, value: Any) -> Any:
        """The run input as JSON, checked against the input schema (before anything is
        written); raises :class:`InputValidationError` naming the offending fields."""
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json", by_alias=True)
        try:
            data = json.loads(canonical_json(value))
        except InvalidInputError as error:
            raise InputValidationError(self.id, [("input", str(error))]) from error
        import jsonschema

        validator = jsonschema.Draft7Validator(self.input_schema)
        problems = [
            (_json_path(error.absolute_path), error.message)
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
        )

    def run(self, input: Any, **options: Any) -> RunResult:
        """``run_workflow(self, input, **options)``."""
        return run_workflow(self, input, **options)


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
) -> WorkflowDefinition:
    """Define a workflow (upstream's ``defineWorkflow``).

    ``input``/``output``: a pydantic model, any type pydantic can describe (``list[Verdict]``,
    ``str``), or a JSON Schema (dict or bool); they must stay inside the LWIR schema subset.
    ``model``: a litellm model string, a :func:`model` slot, or several (the first is the
    default; the planner picks among them per step). ``planner_model`` defaults to the first.
    ``tools``: :class:`~little_dist.tools.Tool` objects or plain typed functions. ``skills``:
    :func:`skill` texts given to every model. ``plan``: a fixed LWIR, used as is (no planner
    model call). ``harness``: one harness for every role, or a mapping role -> harness.
    ``system``: extra instructions for the planner. ``max_revisions``: planner drafts before
    giving up.
    """
    if not isinstance(id, str) or not _WORKFLOW_ID.match(id):
        raise InvalidInputError(f"workflow id must match [A-Za-z0-9][A-Za-z0-9_.-]*, got {id!r}")
    if not isinstance(description, str):
        raise InvalidInputError(f"workflow {id!r}: description must be a string")
    if isinstance(max_revisions, bool) or not isinstance(max_revisions, int) or max_revisions < 1:
        raise InvalidInputError(f"workflow {id!r}: max_revisions must be a positive int")
    input_schema, input_adapter = _schema_of(input, "input")
    output_schema, output_adapter = _schema_of(output, "output")
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
    slots = _resolve_slots([_as_slot(item, "model") for item in given])
    if planner_model is None:
        planner_slot_id, planner_slot = next(iter(slots.items()))
    else:
        planner_slot = _as_slot(planner_model, "planner_model")
        planner_slot_id = planner_slot.id or _derive_slot_id(planner_slot, len(slots), set(slots))
    registry = ToolRegistry()
    for item in tools:
        registry.register(item if isinstance(item, Tool) else tool(item))
    skill_list = tuple(skills)
    for given_skill in skill_list:
        if not isinstance(given_skill, SkillDescriptor):
            kind = type(given_skill).__name__
            raise InvalidInputError(
                f"workflow {id!r}: skills must be made with skill(), got {kind}"
            )
    if plan is not None and not isinstance(plan, Mapping):
        raise InvalidInputError(f"workflow {id!r}: plan must be an LWIR document (a dict)")
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
    )


# -- running --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunResult:
    """A finished run: ``output`` (validated; a model instance for a pydantic output),
    ``usage`` (tokens and ``cost_usd``, ``None`` when unpriced) and the folded ``state``."""

    run_id: str
    status: str
    output: Any
    usage: UsageTotals
    state: RunState
    workflow_version_id: str | None


def _new_run_id() -> str:
    return f"run_{uuid.uuid4().hex[:20]}"


def _failure(definition: WorkflowDefinition, run_id: str, state: RunState) -> RunFailedError:
    error = state.error if isinstance(state.error, Mapping) else {}
    cause = error.get("causeCode")
    cause_code = cause if isinstance(cause, str) and cause else "step_failed"
    failed = [path for path, step in state.steps.items() if step.status == "failed"]
    step_path = error.get("stepPath")
    failed_step = step_path if isinstance(step_path, str) else (failed[-1] if failed else None)
    message = error.get("message")
    result = RunResult(
        run_id=run_id,
        status=state.status,
        output=state.output if state.has_output else None,
        usage=state.usage,
        state=state,
        workflow_version_id=state.workflow_version_id,
    )
    text = f"Run {run_id!r} of workflow {definition.id!r} failed ({cause_code})"
    if isinstance(message, str) and message:
        text += f": {message}"
    return RunFailedError(
        text,
        run_id=run_id,
        workflow_version_id=state.workflow_version_id or "uncompiled",
        cause_code=cause_code,
        error=error,
        failed_step_path=failed_step,
        result=result,
    )


def _result(definition: WorkflowDefinition, run_id: str, state: RunState) -> RunResult:
    if state.status == "failed":
        raise _failure(definition, run_id, state)
    if state.status != "completed":
        raise LittleError(f"Run {run_id!r} stopped before it finished (status {state.status}).")
    import jsonschema

    output = state.output
    errors = list(jsonschema.Draft7Validator(definition.output_schema).iter_errors(output))
    if errors:
        raise InvalidInputError(
            f"Run {run_id!r}: recorded output does not match the output schema of "
            f"{definition.id!r}: {errors[0].message}"
        )
    return RunResult(
        run_id=run_id,
        status=state.status,
        output=definition.parse_output(output),
        usage=state.usage,
        state=state,
        workflow_version_id=state.workflow_version_id,
    )


def run_workflow(
    workflow: WorkflowDefinition,
    input: Any,
    *,
    world: World | None = None,
    run_id: str | None = None,
    harness: Harness | Mapping[HarnessRole, Harness] | None = None,
    max_workers: int = 8,
    progress: Callable[[Any], None] | None = None,
) -> RunResult:
    """Plan (or take ``plan=``), compile and run ``workflow`` on ``input`` in this process.

    ``world`` defaults to ``LocalWorld(".little-workflow")``. ``input`` is validated against
    the input schema before anything is written. A ``run_id`` that already finished returns
    its recorded result without calling any model or tool; one that stopped part way
    resumes. Raises :class:`RunFailedError` when the run fails.
    """
    from little_dist.ids import validate_run_id
    from little_dist.planner import resolve_version
    from little_dist.run_state import materialize_run_state

    if not isinstance(workflow, WorkflowDefinition):
        raise InvalidInputError(
            f"run_workflow expects a workflow from define_workflow(), got {type(workflow).__name__}"
        )
    run_input = workflow.validate_input(input)
    if run_id is None:
        run_id = _new_run_id()
    validate_run_id(run_id)
    if world is None:
        from little_dist.world.local import LocalWorld

        world = LocalWorld()
    events = world.list_events(run_id)
    if events:
        _check_same_input(run_id, events, run_input)
        state = materialize_run_state(events, run_id=run_id)
        if state.status in ("completed", "failed"):
            return _result(workflow, run_id, state)
    capabilities = workflow.capabilities(harness)
    version = resolve_version(world, run_id, workflow, run_input, capabilities=capabilities)
    if version is None:  # planning failed and recorded RunFailed
        return _result(workflow, run_id, materialize_run_state(world.list_events(run_id)))
    from little_dist.local_runner import run_version

    state = run_version(
        world,
        version,
        run_input,
        run_id=run_id,
        capabilities=capabilities,
        max_workers=max_workers,
        progress=progress,
    )
    return _result(workflow, run_id, state)


def _check_same_input(run_id: str, events: Sequence[Any], run_input: Any) -> None:
    for event in events:
        if event.type == "RunStarted" and "input" in event.payload:
            if sha256_digest(event.payload["input"]) != sha256_digest(run_input):
                raise InvalidInputError(
                    f"Run {run_id!r} was started with a different input; use a new run id."
                )
            return
        if event.type == "OrchestrationRequested":
            recorded = event.payload.get("inputHash")
            if isinstance(recorded, str) and recorded != sha256_digest(run_input):
                raise InvalidInputError(
                    f"Run {run_id!r} was started with a different input; use a new run id."
                )
