"""Per-step field checks: output contract, ``sensitive``, ``maxVisits``, ``onFailure``, code.run."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

from little_dist.canonical import sha256_hex_text
from little_dist.lwir._js import MISSING, is_integer, is_number, is_record, js_has_key, json_quote
from little_dist.lwir.findings import Finding, error, unimplemented_field
from little_dist.lwir.permissions import Allowlists
from little_dist.lwir.schema import validate_schema_value

__all__ = [
    "OUTPUT_MODES",
    "STEP_TYPES",
    "code_file_digest",
    "code_path_clashes",
    "validate_code_run",
    "validate_max_visits",
    "validate_on_failure",
    "validate_output",
    "validate_sensitive",
]

STEP_TYPES: Final = ("ai.generate", "tool.call", "code.run", "parallel", "decision")
OUTPUT_MODES: Final = ("text", "object", "array", "choice", "json")
MAX_VISITS_LIMIT: Final = 100
_SHA256_DIGEST = re.compile(r"sha256:[0-9a-f]{64}\Z")
_DENIED: Final = ("deny", False)


def code_file_digest(content: str) -> str:
    """The pinned digest of a code.run file: sha256 of its raw UTF-8 text (not canonical JSON)."""
    return "sha256:" + sha256_hex_text(content)


def code_path_clashes(names: Iterable[str]) -> list[tuple[str, str]]:
    """``(file, path)`` pairs of code.run file names where ``path`` lies inside ``file``
    (``a`` and ``a/b.ts``): both cannot be written, one is a file and the other needs it to
    be a folder. Each path inside another file is named once, with the outermost such file."""
    files = set(names)
    clashes: list[tuple[str, str]] = []
    for name in sorted(files):
        parts = name.split("/")
        for end in range(1, len(parts)):
            folder = "/".join(parts[:end])
            if folder in files:
                clashes.append((folder, name))
                break
    return clashes


def validate_output(output: Any, output_path: str, findings: list[Finding]) -> str | None:
    """Check a non-decision step's ``output``; return its mode when the mode is valid."""
    if not is_record(output):
        findings.append(error("output.invalid", output_path, "Step output must be an object."))
        return None
    mode = output.get("mode")
    if type(mode) is not str or mode not in OUTPUT_MODES:
        findings.append(error("output.invalid", output_path, "Unsupported output mode."))
        return None
    for key in ("name", "description"):
        value = output.get(key, MISSING)
        if value is not MISSING and type(value) is not str:
            findings.append(
                error(
                    "output.invalid_metadata",
                    f"{output_path}.{key}",
                    f"output.{key} must be a string.",
                )
            )
    schema = output.get("schema", MISSING)
    if mode in ("object", "array"):
        if schema is MISSING:
            findings.append(
                error(
                    "output.missing_schema",
                    f"{output_path}.schema",
                    f"{mode} output requires schema.",
                )
            )
        else:
            validate_schema_value(schema, f"{output_path}.schema", findings)
    elif mode == "choice":
        values = output.get("values")
        if type(values) is not list:
            findings.append(
                error(
                    "output.missing_values",
                    f"{output_path}.values",
                    "choice output requires values.",
                )
            )
        else:
            for index, value in enumerate(values):
                if type(value) is not str:
                    findings.append(
                        error(
                            "output.invalid_values",
                            f"{output_path}.values[{index}]",
                            "Choice values must be strings.",
                        )
                    )
    elif mode == "json" and schema is not MISSING:
        validate_schema_value(schema, f"{output_path}.schema", findings)
    return mode


def validate_sensitive(step: dict[str, Any], step_path: str, findings: list[Finding]) -> None:
    value = step.get("sensitive", MISSING)
    if value is not MISSING and type(value) is not bool:
        findings.append(
            error(
                "step.sensitive_must_be_boolean",
                f"{step_path}.sensitive",
                "sensitive must be a boolean.",
            )
        )


def validate_max_visits(step: dict[str, Any], step_path: str, findings: list[Finding]) -> None:
    value = step.get("maxVisits", MISSING)
    if value is MISSING:
        return
    if not is_integer(value) or not 1 <= value <= MAX_VISITS_LIMIT:
        findings.append(
            error(
                "step.max_visits_out_of_range",
                f"{step_path}.maxVisits",
                f"maxVisits must be an integer in [1, {MAX_VISITS_LIMIT}].",
            )
        )


def validate_on_failure(
    step: dict[str, Any],
    step_path: str,
    step_type: str,
    allow: Allowlists,
    findings: list[Finding],
) -> None:
    """``onFailure.repair`` (ai.generate only) and ``onFailure.fixer`` (code.run only)."""
    on_failure = step.get("onFailure", MISSING)
    if on_failure is MISSING:
        return
    if not is_record(on_failure):
        findings.append(
            error(
                "fixer.invalid_config",
                f"{step_path}.onFailure",
                "onFailure must be an object when provided.",
            )
        )
        return
    _validate_repair(
        on_failure.get("repair", MISSING), f"{step_path}.onFailure.repair", step_type, findings
    )
    fixer = on_failure.get("fixer", MISSING)
    if fixer is MISSING:
        return
    fixer_path = f"{step_path}.onFailure.fixer"
    if not is_record(fixer):
        findings.append(
            error("fixer.invalid_config", fixer_path, "onFailure.fixer must be an object.")
        )
        return
    if step_type != "code.run":
        findings.append(
            error(
                "fixer.unsupported_step",
                fixer_path,
                "onFailure.fixer is supported only for code.run steps in alpha.",
            )
        )
    model = fixer.get("model")
    if type(model) is not str or not model:
        findings.append(
            error(
                "fixer.model.missing",
                f"{fixer_path}.model",
                "fixer.model must be a non-empty model slot string.",
            )
        )
    elif not allow.allows_model(model):
        findings.append(
            error(
                "fixer.model.disallowed",
                f"{fixer_path}.model",
                f"Fixer model '{model}' is not in the workflow allowlist.",
            )
        )
    if not _is_positive_integer(fixer.get("maxAttempts")):
        findings.append(
            error(
                "fixer.max_attempts_invalid",
                f"{fixer_path}.maxAttempts",
                "fixer.maxAttempts must be a positive integer.",
            )
        )
    system = fixer.get("system")
    if type(system) is not str or not system:
        findings.append(
            error(
                "fixer.system_missing",
                f"{fixer_path}.system",
                "fixer.system must be a non-empty string.",
            )
        )


def _is_positive_integer(value: Any) -> bool:
    return is_number(value) and is_integer(value) and value >= 1


def _validate_repair(
    repair: Any, repair_path: str, step_type: str, findings: list[Finding]
) -> None:
    if repair is MISSING:
        return
    if not is_record(repair):
        findings.append(
            error("repair.invalid_config", repair_path, "onFailure.repair must be an object.")
        )
        return
    if step_type != "ai.generate":
        findings.append(
            error(
                "repair.unsupported_step",
                repair_path,
                "onFailure.repair is supported only for ai.generate steps in alpha.",
            )
        )
    mode = repair.get("mode")
    if mode not in ("self", "escalate") or type(mode) is not str:
        findings.append(
            error(
                "repair.invalid_mode",
                f"{repair_path}.mode",
                'repair.mode must be "self" or "escalate".',
            )
        )
    elif mode == "escalate":
        # Upstream's repair loop silently skipped anything but "self"; reject it loudly.
        findings.append(
            unimplemented_field("onFailure.repair.mode=escalate", f"{repair_path}.mode")
        )
    if not _is_positive_integer(repair.get("maxAttempts")):
        findings.append(
            error(
                "repair.invalid_max_attempts",
                f"{repair_path}.maxAttempts",
                "repair.maxAttempts must be an integer >= 1.",
            )
        )
    if "model" in repair:
        # Only the unimplemented finding: an allowlist complaint would contradict "remove it".
        findings.append(unimplemented_field("onFailure.repair.model", f"{repair_path}.model"))


def _is_safe_code_path(value: str) -> bool:
    if not value or value.startswith("/") or "\\" in value or "\0" in value:
        return False
    return all(segment not in ("", ".", "..") for segment in value.split("/"))


def validate_code_run(step: dict[str, Any], step_path: str, findings: list[Finding]) -> None:
    """code.run: a safe ``.ts`` entrypoint among pinned ``files`` and a denied ``sandbox``."""
    config = step.get("with")
    with_path = f"{step_path}.with"
    if not is_record(config):
        findings.append(error("code.invalid_config", with_path, "code.run config is required."))
        return
    entrypoint = config.get("entrypoint")
    if type(entrypoint) is not str or not entrypoint:
        findings.append(
            error(
                "code.missing_entrypoint",
                f"{with_path}.entrypoint",
                "code.run steps require an entrypoint.",
            )
        )
    elif not _is_safe_code_path(entrypoint) or not entrypoint.endswith(".ts"):
        findings.append(
            error(
                "code.invalid_entrypoint",
                f"{with_path}.entrypoint",
                "code.run entrypoint must be a safe relative .ts path.",
            )
        )
    files = config.get("files")
    if not is_record(files) or not files:
        findings.append(
            error(
                "code.missing_files",
                f"{with_path}.files",
                "code.run steps require pinned source files.",
            )
        )
    else:
        for file_name, file in files.items():
            _validate_code_file(
                file_name, file, f"{with_path}.files[{json_quote(file_name)}]", findings
            )
        # Not an upstream check: upstream refuses no such pair, and its runtime cannot write
        # both either. The same finding as any other file path that cannot be used.
        for folder, inside in code_path_clashes(n for n in files if _is_safe_code_path(n)):
            findings.append(
                error(
                    "code.invalid_file_path",
                    f"{with_path}.files[{json_quote(inside)}]",
                    f"code.run file path {inside!r} is inside {folder!r}, which is a file too.",
                )
            )
        if type(entrypoint) is str and not js_has_key(entrypoint, files):
            findings.append(
                error(
                    "code.invalid_entrypoint",
                    f"{with_path}.entrypoint",
                    "code.run entrypoint must exist in files.",
                )
            )
    _validate_sandbox(config.get("sandbox", MISSING), f"{with_path}.sandbox", findings)


def _validate_code_file(name: str, file: Any, file_path: str, findings: list[Finding]) -> None:
    if not _is_safe_code_path(name):
        findings.append(
            error(
                "code.invalid_file_path",
                file_path,
                "code.run file paths must be safe relative paths.",
            )
        )
    if not is_record(file):
        findings.append(
            error("code.invalid_file", file_path, "code.run file entries must be objects.")
        )
        return
    content = file.get("content")
    if type(content) is not str:
        findings.append(
            error(
                "code.invalid_file",
                f"{file_path}.content",
                "code.run file content must be a string.",
            )
        )
    digest = file.get("sha256")
    if type(digest) is not str or not _SHA256_DIGEST.match(digest):
        findings.append(
            error(
                "code.invalid_file_hash",
                f"{file_path}.sha256",
                "code.run file entries require a sha256 digest.",
            )
        )
    elif type(content) is str and digest != code_file_digest(content):
        findings.append(
            error(
                "code.invalid_file_hash",
                f"{file_path}.sha256",
                "code.run file hash does not match content.",
            )
        )


def _is_denied(value: Any) -> bool:
    return value == "deny" or value is False


def _validate_sandbox(sandbox: Any, sandbox_path: str, findings: list[Finding]) -> None:
    if sandbox is MISSING:
        findings.append(
            error(
                "code.missing_sandbox",
                sandbox_path,
                "code.run steps require an explicit denied sandbox policy.",
            )
        )
        return
    if not is_record(sandbox):
        findings.append(
            error(
                "code.invalid_sandbox", sandbox_path, "code.run sandbox policy must be an object."
            )
        )
        return
    if not _is_denied(sandbox.get("network", MISSING)):
        findings.append(
            error(
                "code.invalid_sandbox",
                f"{sandbox_path}.network",
                "code.run sandbox network access must be denied.",
            )
        )
    messages = (
        ("env", "code.run sandbox environment access must be denied."),
        (
            "fs",
            "code.run sandbox filesystem access must be denied unless explicit mounts are "
            "supported.",
        ),
    )
    for key, message in messages:
        value = sandbox.get(key, MISSING)
        if value is not MISSING and not _is_denied(value):
            findings.append(error("code.invalid_sandbox", f"{sandbox_path}.{key}", message))
