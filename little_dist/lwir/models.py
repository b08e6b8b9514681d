"""Typed, immutable models of a VALID LWIR v0.1 document.

Build them with :func:`little_dist.lwir.parse_lwir`, which validates first: the models type
what the validator guarantees and nothing more, so they are not a second validator. Fields
keep upstream's camelCase names as aliases (``maxVisits``, ``onFailure``, ``with``), and
unknown keys are kept as extras (upstream ignores them), so
``model_dump(by_alias=True, exclude_unset=True)`` gives back the document that was parsed.

Steps are a union discriminated on ``uses``::

    for step in workflow.steps:
        if isinstance(step, AiGenerateStep):
            step.with_.model
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pydantic.alias_generators import to_camel

__all__ = [
    "AiGenerateConfig",
    "AiGenerateStep",
    "ArrayOutput",
    "ChoiceOutput",
    "CodeFile",
    "CodeRunConfig",
    "CodeRunSandbox",
    "CodeRunStep",
    "DecisionCase",
    "DecisionConfig",
    "DecisionStep",
    "FanIn",
    "FixerConfig",
    "JsonOutput",
    "JsonSchema",
    "LwirDocument",
    "LwirModel",
    "Metadata",
    "ObjectOutput",
    "OnFailure",
    "ParallelCardinality",
    "ParallelConfig",
    "ParallelStep",
    "Permissions",
    "RepairConfig",
    "SchemaSpec",
    "Step",
    "StepOutput",
    "TextOutput",
    "ToolCallConfig",
    "ToolCallStep",
]

#: A JSON Schema in the alpha subset: ``true``/``false`` or a schema object.
JsonSchema: TypeAlias = bool | dict[str, JsonValue]
_Denied: TypeAlias = Literal["deny", False]


class LwirModel(BaseModel):
    """Base of the LWIR models: frozen, camelCase aliases, unknown keys kept as extras."""

    model_config = ConfigDict(
        frozen=True,
        extra="allow",
        alias_generator=to_camel,
        populate_by_name=True,
    )


class Metadata(LwirModel):
    name: str
    version: JsonValue = None
    description: JsonValue = None


class SchemaSpec(LwirModel):
    """``input`` / ``output``: the schema a workflow's input or final output must match."""

    json_schema: JsonSchema = Field(alias="schema")


class Permissions(LwirModel):
    """Allowlists. ``secrets``/``network`` are always empty in a valid document."""

    models: list[str] | None = None
    tools: list[str] | None = None
    secrets: list[str] | None = None
    network: list[str] | None = None


class _OutputBase(LwirModel):
    name: str | None = None
    description: str | None = None


class TextOutput(_OutputBase):
    mode: Literal["text"]


class ObjectOutput(_OutputBase):
    mode: Literal["object"]
    json_schema: JsonSchema = Field(alias="schema")


class ArrayOutput(_OutputBase):
    mode: Literal["array"]
    json_schema: JsonSchema = Field(alias="schema")


class ChoiceOutput(_OutputBase):
    mode: Literal["choice"]
    values: list[str]


class JsonOutput(_OutputBase):
    mode: Literal["json"]
    json_schema: JsonSchema | None = Field(default=None, alias="schema")


#: A step's output contract, discriminated on ``mode``.
StepOutput: TypeAlias = Annotated[
    TextOutput | ObjectOutput | ArrayOutput | ChoiceOutput | JsonOutput,
    Field(discriminator="mode"),
]


class RepairConfig(LwirModel):
    """``onFailure.repair`` (ai.generate): re-run the step's own model with the findings."""

    mode: Literal["self", "escalate"]
    max_attempts: int
    model: str | None = None


class FixerConfig(LwirModel):
    """``onFailure.fixer`` (code.run): a harness session that repairs the code."""

    model: str
    max_attempts: int
    system: str


class OnFailure(LwirModel):
    fixer: FixerConfig | None = None
    repair: RepairConfig | None = None


class AiGenerateConfig(LwirModel):
    model: str
    prompt: JsonValue = None


class ToolCallConfig(LwirModel):
    tool: str
    args: JsonValue = None


class CodeFile(LwirModel):
    """A pinned source file: ``sha256`` is ``"sha256:" + hex(sha256(utf8(content)))``."""

    sha256: str
    content: str


class CodeRunSandbox(LwirModel):
    network: _Denied
    env: _Denied | None = None
    fs: _Denied | None = None


class CodeRunConfig(LwirModel):
    entrypoint: str
    files: dict[str, CodeFile]
    sandbox: CodeRunSandbox


class ParallelCardinality(LwirModel):
    kind: Literal["matches_items"]


class FanIn(LwirModel):
    order: Literal["input", "itemKey"]
    output: Literal["array"]
    output_step: str | None = None


class ParallelConfig(LwirModel):
    items: str
    item_key: str
    cardinality: ParallelCardinality
    max_branches: int
    max_concurrency: int
    failure_mode: Literal["fail_fast", "all_settled"]
    fan_in: FanIn


class DecisionCase(LwirModel):
    when: str
    to: str


class DecisionConfig(LwirModel):
    cases: list[DecisionCase] = Field(default_factory=list)
    default: str


class _StepBase(LwirModel):
    id: str
    needs: list[str] | None = None
    input: JsonValue = None
    sensitive: bool | None = None
    max_visits: int | None = None
    on_failure: OnFailure | None = None

    @property
    def visit_limit(self) -> int:
        """``maxVisits``, defaulting to 1 (a plain DAG step)."""
        return 1 if self.max_visits is None else self.max_visits

    @property
    def dependencies(self) -> list[str]:
        """``needs``, defaulting to none."""
        return [] if self.needs is None else self.needs


class AiGenerateStep(_StepBase):
    uses: Literal["ai.generate"]
    with_: AiGenerateConfig = Field(alias="with")
    output: StepOutput


class ToolCallStep(_StepBase):
    uses: Literal["tool.call"]
    with_: ToolCallConfig = Field(alias="with")
    output: StepOutput


class CodeRunStep(_StepBase):
    uses: Literal["code.run"]
    with_: CodeRunConfig = Field(alias="with")
    output: StepOutput


class ParallelStep(_StepBase):
    """Runs ``steps`` once per item of ``with.items``; its output is the fan-in array."""

    uses: Literal["parallel"]
    with_: ParallelConfig = Field(alias="with")
    output: StepOutput
    steps: list[Step]


class DecisionStep(_StepBase):
    """Routes to the first case whose ``when`` holds, else ``default`` (``"end"`` ends scope)."""

    uses: Literal["decision"]
    with_: DecisionConfig = Field(alias="with")


#: One LWIR step, discriminated on ``uses``.
Step: TypeAlias = Annotated[
    AiGenerateStep | ToolCallStep | CodeRunStep | ParallelStep | DecisionStep,
    Field(discriminator="uses"),
]


class LwirDocument(LwirModel):
    """A valid LWIR v0.1 workflow."""

    api_version: Literal["littleworkflow.dev/v0.1"]
    kind: Literal["Workflow"]
    metadata: Metadata
    input: SchemaSpec
    output: SchemaSpec
    permissions: Permissions | None = None
    steps: list[Step]

    def step(self, step_id: str) -> Step | None:
        """The top-level step with this id, if any."""
        return next((step for step in self.steps if step.id == step_id), None)


ParallelStep.model_rebuild()
LwirDocument.model_rebuild()
