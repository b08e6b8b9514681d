"""The alpha JSON Schema subset LWIR accepts for input, output and step output schemas.

A schema passes in three stages, as upstream's does: it must be a boolean or a plain object;
it must be a valid draft-07 schema (upstream asks Ajv; we ask ``jsonschema``'s draft-07
meta-schema, so only the gist of those messages matches); and every keyword, at every depth,
must be inside the subset. Findings for nested schemas carry the ROOT schema's path
(``$.input.schema``), never the nested keyword's.
"""

from __future__ import annotations

import json
from typing import Any, Final

from jsonschema import Draft7Validator

from little_dist.lru import TextKeyedCache
from little_dist.lwir._js import (
    MISSING,
    is_integer,
    is_number,
    is_record,
    is_string_array,
    js_has_key,
)
from little_dist.lwir.findings import Finding, error

__all__ = ["validate_schema_value"]

_VALID_TYPES: Final = frozenset(
    {"array", "boolean", "integer", "null", "number", "object", "string"}
)
# Annotations constrain nothing and reach the model verbatim, so they are safe to accept.
# `default`, `deprecated`, `readOnly`, `writeOnly` stay out: nothing in the runtime honours them.
_ANNOTATION_KEYS: Final = ("description", "examples", "title")
_SUPPORTED_KEYS: Final = frozenset(
    {
        "additionalProperties",
        "anyOf",
        "const",
        "enum",
        "items",
        "maxItems",
        "maxLength",
        "maximum",
        "minItems",
        "minLength",
        "minimum",
        "oneOf",
        "properties",
        "required",
        "type",
        "propertyNames",
        *_ANNOTATION_KEYS,
    }
)
_META_VALIDATOR: Final = Draft7Validator(Draft7Validator.META_SCHEMA)
# Meta-schema results by schema text: generated workflows repeat the same few schemas.
# Bounded by count and by the texts' total length.
_META_CACHE: TextKeyedCache[tuple[str, ...]] = TextKeyedCache(4096, 16 * 1024 * 1024)


def validate_schema_value(value: Any, path: str, findings: list[Finding]) -> None:
    """Append ``schema.invalid`` findings for ``value``, a schema found at ``path``."""
    if type(value) is bool:
        return
    if not is_record(value):
        findings.append(
            error(
                "schema.invalid",
                path,
                "Unsupported schema: expected a plain JSON Schema object or boolean schema.",
            )
        )
        return
    try:
        problems = _meta_schema_problems(value)
    except Exception as exc:  # upstream reports whatever Ajv throws as a finding
        findings.append(error("schema.invalid", path, str(exc) or "JSON Schema is invalid."))
        return
    if problems:
        findings.append(error("schema.invalid", path, ", ".join(problems)))
        return
    _check_record(value, path, findings)


def _meta_schema_problems(schema: dict[str, Any]) -> tuple[str, ...]:
    if _surely_meta_valid(schema):
        return ()
    return _META_CACHE.get_or_build(
        json.dumps(schema, ensure_ascii=False),
        lambda: tuple(_ajv_style(error) for error in _META_VALIDATOR.iter_errors(schema)),
    )


def _is_non_negative_integer(value: Any) -> bool:
    return is_integer(value) and value >= 0


def _is_schema_array(value: Any) -> bool:
    return type(value) is list and bool(value) and all(_surely_meta_valid(item) for item in value)


def _surely_meta_valid(schema: Any) -> bool:
    """A fast, conservative draft-07 meta-schema check for schemas inside the subset.

    True only when the draft-07 meta-schema certainly accepts ``schema``; False means "ask
    jsonschema", which is exact but slow (about 0.15 ms a schema, too slow for 200 steps).
    """
    if type(schema) is bool:
        return True
    if not is_record(schema):
        return False
    for key, value in schema.items():
        if key == "type":
            if type(value) is str:
                ok = value in _VALID_TYPES
            else:
                ok = (
                    is_string_array(value)
                    and bool(value)
                    and len(set(value)) == len(value)
                    and all(entry in _VALID_TYPES for entry in value)
                )
        elif key in ("enum", "examples"):
            ok = type(value) is list
        elif key == "const":
            ok = True
        elif key == "properties":
            ok = is_record(value) and all(_surely_meta_valid(item) for item in value.values())
        elif key == "required":
            ok = is_string_array(value) and len(set(value)) == len(value)
        elif key in ("additionalProperties", "items", "propertyNames"):
            ok = _surely_meta_valid(value)
        elif key in ("anyOf", "oneOf"):
            ok = _is_schema_array(value)
        elif key in ("maxItems", "minItems", "maxLength", "minLength"):
            ok = _is_non_negative_integer(value)
        elif key in ("maximum", "minimum"):
            ok = is_number(value)
        elif key in ("description", "title"):
            ok = type(value) is str
        else:
            ok = False
        if not ok:
            return False
    return True


def _ajv_style(problem: Any) -> str:
    """Ajv's ``errorsText`` layout: ``data/<instance path> <message>``."""
    pointer = "".join(f"/{part}" for part in problem.absolute_path)
    if problem.validator == "type":
        expected = problem.validator_value
        names = expected if isinstance(expected, list) else [expected]
        message = f"must be {','.join(str(name) for name in names)}"
    elif problem.validator == "minimum":
        message = f"must be >= {problem.validator_value}"
    elif problem.validator == "enum":
        message = "must be equal to one of the allowed values"
    elif problem.validator == "anyOf":
        message = "must match a schema in anyOf"
    elif problem.validator == "uniqueItems":
        message = "must NOT have duplicate items"
    else:
        message = str(problem.message)
    return f"data{pointer} {message}"


def _check_nested(value: Any, path: str, findings: list[Finding]) -> None:
    if type(value) is bool:
        return
    if not is_record(value):
        findings.append(error("schema.invalid", path, "Nested JSON Schema must be an object."))
        return
    _check_record(value, path, findings)


# Long on purpose: one flat check per JSON Schema keyword, in upstream's order (which fixes
# the order of the findings); each is a few lines, and split they would read no better.
def _check_record(schema: dict[str, Any], path: str, findings: list[Finding]) -> None:
    for key in schema:
        if key not in _SUPPORTED_KEYS:
            findings.append(
                error(
                    "schema.invalid",
                    path,
                    f"Unsupported JSON Schema keyword '{key}' in alpha LWIR.",
                )
            )
            return

    get = schema.get
    if "type" in schema:
        _check_type(schema["type"], path, findings)
    required = get("required", MISSING)
    if required is not MISSING and not is_string_array(required):
        findings.append(
            error("schema.invalid", path, "JSON Schema required must be a string array.")
        )
    properties = get("properties", MISSING)
    # A map shape declares its keys with `propertyNames`, so a bare `required` beside it is
    # coherent (zod's exhaustive z.record(z.enum(...))); anywhere else it is an authoring slip.
    if is_string_array(required) and not is_record(properties) and "propertyNames" not in schema:
        findings.append(
            error(
                "schema.invalid",
                path,
                "JSON Schema required keys must have a matching properties object.",
            )
        )
    if properties is not MISSING:
        if not is_record(properties):
            findings.append(
                error("schema.invalid", path, "JSON Schema properties must be an object.")
            )
        else:
            for nested in properties.values():
                _check_nested(nested, path, findings)
            if is_string_array(required):
                for required_key in required:
                    if not js_has_key(required_key, properties):
                        findings.append(
                            error(
                                "schema.invalid",
                                path,
                                f"JSON Schema required key '{required_key}' must exist in "
                                "properties.",
                            )
                        )
    additional = get("additionalProperties", MISSING)
    if additional is not MISSING:
        if type(additional) is not bool and not is_record(additional):
            findings.append(
                error(
                    "schema.invalid",
                    path,
                    "JSON Schema additionalProperties must be a boolean or schema.",
                )
            )
        elif is_record(additional):
            _check_record(additional, path, findings)
    if "propertyNames" in schema:
        key_schema = schema["propertyNames"]
        _check_nested(key_schema, path, findings)
        key_type = _non_string_property_name_type(key_schema)
        if key_type is not None:
            findings.append(
                error(
                    "schema.invalid",
                    path,
                    f"JSON Schema propertyNames type '{key_type}' can never match: JSON object "
                    "keys are strings. Use a string-keyed record (z.record(z.string(), ...)) or "
                    "an enum of string keys.",
                )
            )
    if "items" in schema:
        _check_nested(schema["items"], path, findings)
    if "enum" in schema and type(schema["enum"]) is not list:
        findings.append(error("schema.invalid", path, "JSON Schema enum must be an array."))
    for union_key in ("anyOf", "oneOf"):
        if union_key not in schema:
            continue
        branches = schema[union_key]
        if type(branches) is not list or not branches:
            findings.append(
                error("schema.invalid", path, f"JSON Schema {union_key} must be a non-empty array.")
            )
            continue
        if not _is_supported_union(branches):
            findings.append(
                error(
                    "schema.invalid",
                    path,
                    f"JSON Schema {union_key} branches must be primitive or explicitly "
                    "discriminated object shapes.",
                )
            )
        for branch in branches:
            _check_nested(branch, path, findings)
    for bound in ("minimum", "maximum"):
        value = get(bound, MISSING)
        if value is not MISSING and not is_number(value):
            findings.append(error("schema.invalid", path, f"JSON Schema {bound} must be a number."))
    for bound in ("minItems", "maxItems", "minLength", "maxLength"):
        value = get(bound, MISSING)
        if value is not MISSING and (not is_integer(value) or value < 0):
            findings.append(
                error(
                    "schema.invalid",
                    path,
                    f"JSON Schema {bound} must be a non-negative integer.",
                )
            )
    for low, high in (("minimum", "maximum"), ("minItems", "maxItems"), ("minLength", "maxLength")):
        low_value, high_value = get(low), get(high)
        if is_number(low_value) and is_number(high_value) and low_value > high_value:
            findings.append(
                error(
                    "schema.invalid",
                    path,
                    f"JSON Schema {low} must be less than or equal to {high}.",
                )
            )


def _check_type(value: Any, path: str, findings: list[Finding]) -> None:
    if type(value) is str:
        if value not in _VALID_TYPES:
            findings.append(
                error("schema.invalid", path, f"Unsupported JSON Schema type '{value}'.")
            )
        return
    if is_string_array(value):
        # A type union may only mix primitives: object/array unions are not discriminable.
        for entry in value:
            if entry not in _VALID_TYPES or entry in ("object", "array"):
                findings.append(
                    error("schema.invalid", path, f"Unsupported JSON Schema type '{entry}'.")
                )
                return
        return
    findings.append(
        error("schema.invalid", path, "JSON Schema type must be a string or string array.")
    )


def _non_string_property_name_type(key_schema: Any) -> str | None:
    """The first non-string ``type`` a key schema allows (JSON object keys are strings)."""
    if not is_record(key_schema):
        return None
    declared = key_schema.get("type", MISSING)
    types = declared if type(declared) is list else [declared]
    for entry in types:
        if entry is not MISSING and entry != "string":
            # Upstream only reports it when the offending entry is itself a string.
            if type(entry) is str:
                return entry
            break
    for union_key in ("anyOf", "oneOf"):
        branches = key_schema.get(union_key)
        if type(branches) is not list:
            continue
        for branch in branches:
            found = _non_string_property_name_type(branch)
            if found is not None:
                return found
    return None


def _is_supported_union(branches: list[Any]) -> bool:
    return all(_is_primitive_branch(branch) for branch in branches) or _has_discriminator(branches)


def _is_primitive_branch(branch: Any) -> bool:
    if type(branch) is bool:
        return True
    if not is_record(branch):
        return False
    kind = branch.get("type")
    return type(kind) is str and kind not in ("object", "array") and kind in _VALID_TYPES


def _has_discriminator(branches: list[Any]) -> bool:
    """Every branch is an object with the same required ``const``/``enum`` property."""
    discriminator: str | None = None
    for branch in branches:
        if (
            not is_record(branch)
            or branch.get("type") != "object"
            or not is_record(branch.get("properties"))
        ):
            return False
        required = set(branch["required"]) if is_string_array(branch.get("required")) else set()
        found: str | None = None
        for key, value in branch["properties"].items():
            if key not in required or not is_record(value):
                continue
            if "const" in value or type(value.get("enum")) is list:
                found = key
                break
        if found is None:
            return False
        if discriminator is None:
            discriminator = found
        elif discriminator != found:
            return False
    return discriminator is not None
