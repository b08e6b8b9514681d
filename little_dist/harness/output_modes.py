"""Output modes of ``ai.generate`` steps: instructions, parsing and validation.

Modes (LWIR ``output.mode``): ``text`` (a string), ``object`` (a JSON object, ``schema``
required), ``array`` (a JSON array, ``schema`` required), ``choice`` (one of ``values``) and
``json`` (any JSON value, ``schema`` optional). The default harness puts
:func:`instructions` in the stable part of the prompt, reads the model's final text with
:func:`parse_output`, and the repair loop checks it with :func:`output_findings` (schemas are
checked with ``jsonschema``, draft 7 unless the schema names another).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from little_dist.canonical import canonical_json
from little_dist.harness.replies import json_in_reply
from little_dist.scheduling.schema_checks import compiled_schema

__all__ = [
    "instructions",
    "output_findings",
    "output_spec",
    "parse_output",
    "repair_note",
]


def output_spec(step: Mapping[str, Any]) -> Mapping[str, Any]:
    """The step's ``output`` object (``{"mode": "text"}`` when absent)."""
    spec = step.get("output")
    return spec if isinstance(spec, Mapping) else {"mode": "text"}


def _schema(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    schema = spec.get("schema")
    return schema if isinstance(schema, Mapping) else None


def instructions(spec: Mapping[str, Any]) -> str:
    """What the model is told about the output contract (stable for a given step)."""
    mode = spec.get("mode", "text")
    schema = _schema(spec)
    schema_text = "" if schema is None else canonical_json(dict(schema))
    if mode == "object":
        return (
            "Answer with one JSON object and nothing else (no prose, no code fences). "
            f"It must validate against this JSON Schema:\n{schema_text}"
        )
    if mode == "array":
        return (
            "Answer with one JSON array and nothing else (no prose, no code fences). "
            f"It must validate against this JSON Schema:\n{schema_text}"
        )
    if mode == "choice":
        values = [str(value) for value in spec.get("values") or []]
        return "Answer with exactly one of these values and nothing else: " + " | ".join(values)
    if mode == "json":
        if schema is None:
            return "Answer with one JSON value and nothing else (no prose, no code fences)."
        return (
            "Answer with one JSON value and nothing else (no prose, no code fences). "
            f"It must validate against this JSON Schema:\n{schema_text}"
        )
    return "Answer in plain text."


def parse_output(spec: Mapping[str, Any], text: str) -> Any:
    """The step output carried by the model's final ``text``.

    Structured modes parse JSON (code fences and surrounding prose tolerated); text that is
    not JSON is returned as is, and validation reports it. ``choice`` matches a value exactly,
    then ignoring case, quotes and a trailing period.
    """
    mode = spec.get("mode", "text")
    if mode == "text":
        return text
    if mode == "choice":
        values = [value for value in spec.get("values") or [] if isinstance(value, str)]
        answer = text.strip()
        if answer in values:
            return answer
        cleaned = answer.rstrip(".").strip().strip("\"'`").rstrip(".").strip()
        for value in values:
            if cleaned == value or cleaned.lower() == value.lower():
                return value
        return answer
    return json_in_reply(text)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def output_findings(step: Mapping[str, Any], output: Any) -> list[str]:
    """Why ``output`` does not satisfy the step's output contract (empty when it does)."""
    spec = output_spec(step)
    mode = spec.get("mode", "text")
    if mode == "text":
        if isinstance(output, str):
            return []
        return [f"output does not match text output mode: expected a string, got {_kind(output)}"]
    if mode == "choice":
        values = list(spec.get("values") or [])
        if isinstance(output, str) and output in values:
            return []
        shown = json.dumps(output, ensure_ascii=False, default=str)[:200]
        return [
            "output does not match choice output mode: expected one of "
            f"{', '.join(map(str, values))}, got {shown}"
        ]
    if mode == "object" and not isinstance(output, dict):
        return [
            f"output does not match object output mode: expected a JSON object, got {_kind(output)}"
        ]
    if mode == "array" and not isinstance(output, list):
        return [
            f"output does not match array output mode: expected a JSON array, got {_kind(output)}"
        ]
    schema = _schema(spec)
    if schema is None:
        return []
    findings = []
    validator = compiled_schema(schema).validator
    errors = sorted(validator.iter_errors(output), key=lambda e: list(e.absolute_path))
    for error in errors:
        where = "/".join(str(part) for part in error.absolute_path)
        findings.append(f"{'/' + where if where else '(root)'}: {error.message}")
    return findings


def repair_note(spec: Mapping[str, Any], findings: list[str]) -> str:
    """The ``[OUTPUT REPAIR]`` note a self-repair re-run shows the model."""
    lines = [
        "[OUTPUT REPAIR] Your previous answer did not satisfy this step's output contract.",
        "Findings:",
        *(f"- {finding}" for finding in findings),
        f"Required output mode: {spec.get('mode', 'text')}.",
    ]
    schema = _schema(spec)
    if schema is not None:
        lines.append(f"Required output schema:\n{canonical_json(dict(schema))}")
    if spec.get("mode") == "choice":
        lines.append("Allowed values: " + " | ".join(map(str, spec.get("values") or [])))
    lines.append("Answer again, with output that satisfies the contract and nothing else.")
    return "\n".join(lines)
