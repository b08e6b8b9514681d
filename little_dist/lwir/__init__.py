"""LWIR v0.1: the workflow document format, its validator and its typed models.

``validate_lwir(doc)`` returns upstream's findings (never raises); ``parse_lwir(doc)``
validates and returns an :class:`LwirDocument`, raising :class:`LwirValidationError` when the
document is invalid.
"""

from __future__ import annotations

from little_dist.lwir.findings import UNIMPLEMENTED_FIELD_CODE, Finding, LwirValidationError
from little_dist.lwir.models import (
    AiGenerateConfig,
    AiGenerateStep,
    ArrayOutput,
    ChoiceOutput,
    CodeFile,
    CodeRunConfig,
    CodeRunSandbox,
    CodeRunStep,
    DecisionCase,
    DecisionConfig,
    DecisionStep,
    FanIn,
    FixerConfig,
    JsonOutput,
    JsonSchema,
    LwirDocument,
    Metadata,
    ObjectOutput,
    OnFailure,
    ParallelCardinality,
    ParallelConfig,
    ParallelStep,
    Permissions,
    RepairConfig,
    SchemaSpec,
    Step,
    StepOutput,
    TextOutput,
    ToolCallConfig,
    ToolCallStep,
)
from little_dist.lwir.parse import parse_lwir
from little_dist.lwir.step_checks import code_file_digest
from little_dist.lwir.validate import API_VERSION, KIND, validate_lwir

__all__ = [
    "API_VERSION",
    "KIND",
    "UNIMPLEMENTED_FIELD_CODE",
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
    "Finding",
    "FixerConfig",
    "JsonOutput",
    "JsonSchema",
    "LwirDocument",
    "LwirValidationError",
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
    "code_file_digest",
    "parse_lwir",
    "validate_lwir",
]
