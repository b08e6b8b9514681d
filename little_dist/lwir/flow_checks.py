"""Config checks for the control-flow step kinds: ``parallel`` and ``decision``."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator
from typing import Any, Final

from little_dist.lwir._js import (
    MISSING,
    is_integer,
    is_number,
    is_record,
    is_string_array,
    js_length,
)
from little_dist.lwir.expression_checks import (
    is_valid_template_expression,
    template_expression_references_root,
)
from little_dist.lwir.findings import Finding, error

__all__ = [
    "END",
    "MAX_BRANCHES",
    "decision_targets",
    "validate_decision_config",
    "validate_parallel_config",
    "validate_parallel_output_schema",
]

#: Alpha cap on branches per parallel step.
MAX_BRANCHES: Final = 100
#: The decision target that ends the current scope.
END: Final = "end"
# A dict posing as an array (`{"length": n}`) is iterated up to this many slots at most.
_ARRAY_LIKE_LIMIT: Final = 10_000


def decision_targets(step: dict[str, Any]) -> list[str]:
    """A decision step's routing targets other than ``end``: ``default`` first, then cases."""
    config = step.get("with")
    if step.get("uses") != "decision" or not is_record(config):
        return []
    targets: list[str] = []
    fallback = config.get("default")
    if type(fallback) is str and fallback != END:
        targets.append(fallback)
    cases = config.get("cases")
    if type(cases) is list:
        for case in cases:
            if is_record(case) and type(case.get("to")) is str and case["to"] != END:
                targets.append(case["to"])
    return targets


def _indexed_cases(cases: Any) -> Iterator[Any]:
    """``for (i = 0; i < cases.length; i++) cases[i]`` over whatever ``cases`` holds."""
    if type(cases) is list:
        yield from cases
    elif type(cases) is str:
        # A string has a length and indexes to one-character strings (never a valid case).
        for _ in range(js_length(cases)):
            yield None
    elif is_record(cases):
        length = cases.get("length")
        if is_number(length) and length > 0:
            count = (
                min(math.ceil(length), _ARRAY_LIKE_LIMIT)
                if math.isfinite(length)
                else (_ARRAY_LIKE_LIMIT)
            )
            for index in range(count):
                yield cases.get(str(index))


def validate_decision_config(
    step: dict[str, Any],
    step_path: str,
    scope: Collection[str],
    allow_item_expressions: bool,
    findings: list[Finding],
) -> None:
    """``with.default`` and ``with.cases[{when, to}]``; every target in ``scope`` or ``end``."""
    config = step.get("with")
    config = config if is_record(config) else {}
    fallback = config.get("default")
    if type(fallback) is not str or not fallback:
        findings.append(
            error(
                "decision.default_required",
                f"{step_path}.with.default",
                "Decision step requires 'default' (string step id or 'end').",
            )
        )
    targets: dict[str, None] = {}
    if type(fallback) is str and fallback:
        targets[fallback] = None
    for index, case in enumerate(_indexed_cases(config.get("cases"))):
        case_path = f"{step_path}.with.cases[{index}]"
        when = case.get("when") if is_record(case) else None
        target = case.get("to") if is_record(case) else None
        if type(when) is not str or type(target) is not str or not target:
            findings.append(
                error(
                    "decision.case_invalid",
                    case_path,
                    "Each case must have 'when' (expression string) and 'to' (step id string).",
                )
            )
            continue
        if not is_valid_template_expression(when, allow_item_expressions=allow_item_expressions):
            findings.append(
                error(
                    "expression.invalid",
                    f"{case_path}.when",
                    "Decision case 'when' must be a valid {{ }} template expression.",
                )
            )
        targets[target] = None
    for target in targets:
        if target != END and target not in scope:
            findings.append(
                error(
                    "decision.target_not_in_scope",
                    f"{step_path}.with",
                    f"Decision target '{target}' is not in the same scope.",
                )
            )


def validate_parallel_config(
    step: dict[str, Any],
    step_path: str,
    allow_item_expressions: bool,
    findings: list[Finding],
) -> bool:
    """Check a parallel step's ``with``; return False when there is no config at all."""
    config = step.get("with")
    with_path = f"{step_path}.with"
    if not is_record(config):
        findings.append(error("parallel.invalid", with_path, "Parallel config is required."))
        return False
    items = config.get("items")
    if type(items) is not str or not is_valid_template_expression(
        items, allow_item_expressions=allow_item_expressions
    ):
        findings.append(
            error(
                "parallel.invalid_items",
                f"{with_path}.items",
                "Parallel items must be a valid expression.",
            )
        )
    item_key = config.get("itemKey")
    if (
        type(item_key) is not str
        or not is_valid_template_expression(item_key, allow_item_expressions=True)
        or not template_expression_references_root(item_key, "item")
    ):
        findings.append(
            error(
                "parallel.invalid_item_key",
                f"{with_path}.itemKey",
                "Parallel itemKey must be a valid expression.",
            )
        )
    cardinality = config.get("cardinality")
    if not is_record(cardinality) or cardinality.get("kind") != "matches_items":
        findings.append(
            error(
                "parallel.invalid_cardinality",
                f"{with_path}.cardinality.kind",
                "Parallel cardinality kind must be matches_items.",
            )
        )
    max_branches = config.get("maxBranches")
    max_concurrency = config.get("maxConcurrency")
    if not is_integer(max_branches) or not 1 <= max_branches <= MAX_BRANCHES:
        findings.append(
            error(
                "parallel.invalid_branches",
                f"{with_path}.maxBranches",
                f"maxBranches must be an integer between 1 and {MAX_BRANCHES}.",
            )
        )
    if (
        not is_integer(max_concurrency)
        or max_concurrency < 1
        or (is_integer(max_branches) and max_concurrency > max_branches)
    ):
        findings.append(
            error(
                "parallel.invalid_concurrency",
                f"{with_path}.maxConcurrency",
                "maxConcurrency must be an integer between 1 and maxBranches.",
            )
        )
    if config.get("failureMode") not in ("fail_fast", "all_settled"):
        findings.append(
            error(
                "parallel.invalid_failure_mode",
                f"{with_path}.failureMode",
                "failureMode must be fail_fast or all_settled.",
            )
        )
    _validate_fan_in(step, config.get("fanIn"), f"{with_path}.fanIn", findings)
    return True


def _validate_fan_in(
    step: dict[str, Any], fan_in: Any, fan_in_path: str, findings: list[Finding]
) -> None:
    if not is_record(fan_in):
        findings.append(
            error(
                "parallel.invalid_fan_in",
                fan_in_path,
                "fanIn must use input or itemKey order and array output.",
            )
        )
        return
    if fan_in.get("order") not in ("input", "itemKey"):
        findings.append(
            error(
                "parallel.invalid_fan_in",
                f"{fan_in_path}.order",
                "fanIn order must be input or itemKey.",
            )
        )
    if fan_in.get("output") != "array":
        findings.append(
            error("parallel.invalid_fan_in", f"{fan_in_path}.output", "fanIn output must be array.")
        )
    output_step = fan_in.get("outputStep", MISSING)
    if output_step is MISSING:
        return
    branch = step.get("steps")
    target = next(
        (
            candidate
            for candidate in (branch if type(branch) is list else [])
            if is_record(candidate) and _same_json(candidate.get("id", MISSING), output_step)
        ),
        None,
    )
    if target is None or target.get("uses") == "decision":
        findings.append(
            error(
                "parallel.fan_in_output_step_invalid",
                f"{fan_in_path}.outputStep",
                "fanIn.outputStep must reference a non-decision step defined in the parallel "
                "branch body.",
            )
        )


def _same_json(left: Any, right: Any) -> bool:
    """JavaScript ``===`` between JSON values: primitives by value, containers never equal."""
    if type(left) is not type(right):
        return is_number(left) and is_number(right) and left == right
    if type(left) in (list, dict):
        return False
    return bool(left == right)


def validate_parallel_output_schema(
    step: dict[str, Any], step_path: str, findings: list[Finding]
) -> None:
    """An array-mode parallel output's ``items`` must describe the fan-in envelope."""
    output = step.get("output")
    if not is_record(output) or output.get("mode") != "array":
        return
    schema = output.get("schema")
    if not is_record(schema):
        findings.append(
            error(
                "parallel.invalid_fan_in",
                f"{step_path}.output.schema",
                "Parallel output schema must describe fan-in envelope records.",
            )
        )
        return
    if not _looks_like_envelope(schema.get("items", MISSING)):
        findings.append(
            error(
                "parallel.invalid_fan_in",
                f"{step_path}.output.schema.items",
                "Parallel output items must include itemKey, status, and runtime result fields.",
            )
        )


def _looks_like_envelope(items: Any) -> bool:
    if not is_record(items) or not _allows_object(items):
        return False
    required = items.get("required")
    if not is_string_array(required):
        return False
    if not {"itemKey", "status", "artifacts"} <= set(required):
        return False
    properties = items.get("properties")
    if not is_record(properties):
        return False
    return all(key in properties for key in ("itemKey", "status", "artifacts")) and any(
        key in properties for key in ("output", "outputRef", "error")
    )


def _allows_object(schema: dict[str, Any]) -> bool:
    declared = schema.get("type", MISSING)
    if declared is MISSING:
        return True
    if type(declared) is str:
        return declared == "object"
    return type(declared) is list and "object" in declared
