"""The small checks eval-set validation is made of, and the findings they collect.

A finding is upstream's ``{severity, code, path, message}`` (codes ``evalset.*``, paths
``$.manifest.judge.tpr``). Validation never stops at the first problem: an author fixing a
bundle wants every finding at once, as ``little validate`` gives them for LWIR.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

__all__ = [
    "MAX_DECIMAL_LENGTH",
    "Findings",
    "utf16_key",
]

MAX_DECIMAL_LENGTH: Final = 64
_MAX_SAFE_INTEGER: Final = 2**53 - 1
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?")
_NEGATIVE_ZERO = re.compile(r"-0(?:\.0+)?")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
# Upstream's regexes for personal data in free text: they catch the obvious shapes only.
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
_SSN = re.compile(r"\b\d{3}-\d{2}-\d{4}\b", re.ASCII)
_PHONE = re.compile(r"(?:\+\d{1,3}[ .-]?)?\(?\d{3}\)?[ .-]\d{3}[ .-]\d{4}\b", re.ASCII)


def utf16_key(text: str) -> bytes:
    """JavaScript's string order (UTF-16 code units), which upstream sorts indexes by."""
    return text.encode("utf-16-be", "surrogatepass")


def is_record(value: Any) -> bool:
    return isinstance(value, Mapping)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _safe_integer(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return False
        if value == 0 and math.copysign(1.0, value) < 0:  # JavaScript's -0
            return False
    return abs(value) <= _MAX_SAFE_INTEGER


@dataclass
class Findings:
    """Errors and warnings found so far; ``valid`` when there is no error."""

    errors: list[dict[str, str]] = field(default_factory=list)
    warnings: list[dict[str, str]] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors

    def error(self, code: str, path: str, message: str) -> None:
        self.errors.append({"severity": "error", "code": code, "path": path, "message": message})

    def warn(self, code: str, path: str, message: str) -> None:
        self.warnings.append(
            {"severity": "warning", "code": code, "path": path, "message": message}
        )

    def extend(self, other: Findings, prefix: str) -> None:
        """Add ``other``'s findings, their ``$`` paths moved under ``prefix``."""
        for finding in [*other.errors, *other.warnings]:
            moved = {**finding, "path": prefix + finding["path"][1:]}
            (self.errors if finding["severity"] == "error" else self.warnings).append(moved)

    # -- the payload-wide float rule --------------------------------------------------------

    def integers_only(self, value: Any, path: str = "$") -> None:
        """Every JSON number in a hashed payload is a safe integer: other languages print
        reals differently, and the bundle's hash must be checkable outside JavaScript."""
        if _is_number(value):
            if not _safe_integer(value):
                self.error(
                    "evalset.float_in_hashed_payload",
                    path,
                    "JSON numbers in a content-addressed payload must be safe integers; "
                    f'received {value!r}. Encode real values as decimal strings ("0.93") so '
                    "the hash is reproducible outside JavaScript.",
                )
        elif isinstance(value, list):
            for index, item in enumerate(value):
                self.integers_only(item, f"{path}[{index}]")
        elif is_record(value):
            for key, item in value.items():
                self.integers_only(item, f"{path}.{key}")

    # -- shapes -----------------------------------------------------------------------------

    def record(self, value: Any, path: str) -> Mapping[str, Any] | None:
        if not is_record(value):
            self.error("evalset.schema.invalid", path, f"{path} must be an object.")
            return None
        return value  # type: ignore[no-any-return]

    def array(self, value: Any, path: str) -> list[Any] | None:
        if not isinstance(value, list):
            self.error("evalset.schema.invalid", path, f"{path} must be an array.")
            return None
        return value

    def keys(
        self,
        record: Mapping[str, Any],
        path: str,
        required: Iterable[str],
        optional: Iterable[str] = (),
    ) -> None:
        """Closed key sets: an unknown field never enters a hash unexamined."""
        required = list(required)
        for key in required:
            if key not in record:
                self.error("evalset.schema.missing", f"{path}.{key}", f"{path}.{key} is required.")
        allowed = {*required, *optional}
        for key in record:
            if key not in allowed:
                self.error(
                    "evalset.schema.unknown_key",
                    f"{path}.{key}",
                    f"{path} does not accept the key '{key}'. Eval-set payloads have closed "
                    "key sets so that an unrecognised field can never enter a hash unexamined.",
                )

    def string(self, value: Any, path: str) -> str | None:
        if not isinstance(value, str) or not value:
            self.error("evalset.schema.invalid", path, f"{path} must be a non-empty string.")
            return None
        return value

    def boolean(self, value: Any, path: str) -> bool | None:
        if not isinstance(value, bool):
            self.error("evalset.schema.invalid", path, f"{path} must be a boolean.")
            return None
        return value

    def literal(self, value: Any, expected: str, path: str) -> None:
        if value != expected or not isinstance(value, str):
            self.error("evalset.schema.invalid", path, f'{path} must be "{expected}".')

    def enum(self, value: Any, allowed: Iterable[str], path: str) -> str | None:
        allowed = list(allowed)
        if not isinstance(value, str) or value not in allowed:
            listed = ", ".join(f'"{item}"' for item in allowed)
            self.error("evalset.schema.invalid", path, f"{path} must be one of {listed}.")
            return None
        return value

    def integer(self, value: Any, path: str, minimum: int = 0) -> int | None:
        if not _is_number(value):
            self.error("evalset.schema.invalid", path, f"{path} must be an integer.")
            return None
        if not _safe_integer(value) or value < minimum:
            self.error(
                "evalset.schema.invalid",
                path,
                f"{path} must be a safe integer >= {minimum}; received {value!r}.",
            )
            return None
        return int(value)

    def decimal(self, value: Any, path: str) -> None:
        """A real number is a decimal string (``"0.93"``), never a JSON number."""
        if _is_number(value):
            self.error(
                "evalset.decimal_not_string",
                path,
                f'{path} must be a decimal string such as "0.93", not a JSON number. JSON '
                "numbers are formatted by the JS engine, so a verifier written in another "
                "language could not reproduce this hash.",
            )
        elif not isinstance(value, str):
            self.error("evalset.decimal_not_string", path, f"{path} must be a decimal string.")
        elif len(value) > MAX_DECIMAL_LENGTH:
            self.error(
                "evalset.decimal_malformed",
                path,
                f"{path} exceeds {MAX_DECIMAL_LENGTH} characters.",
            )
        elif not _DECIMAL.fullmatch(value):
            self.error(
                "evalset.decimal_malformed",
                path,
                f"{path} must match -?(0|[1-9][0-9]*)(\\.[0-9]+)? — no exponent, no leading "
                f"'+', no leading zeros; received {value!r}.",
            )
        elif _NEGATIVE_ZERO.fullmatch(value):
            self.error(
                "evalset.decimal_malformed",
                path,
                f"{path} must not be a negative zero; write {value[1:]!r}.",
            )

    def digest(self, value: Any, path: str) -> str | None:
        if not isinstance(value, str) or not _DIGEST.fullmatch(value):
            self.error(
                "evalset.schema.invalid",
                path,
                f"{path} must be a digest of the form sha256:<64 lowercase hex>.",
            )
            return None
        return value

    def timestamp(self, value: Any, path: str) -> str | None:
        """One instant, one spelling: ``YYYY-MM-DDTHH:MM:SSZ``."""
        if not isinstance(value, str) or not _TIMESTAMP.fullmatch(value):
            self.error(
                "evalset.schema.invalid",
                path,
                f"{path} must be an ISO-8601 UTC timestamp at second precision "
                "(YYYY-MM-DDTHH:MM:SSZ). One instant must have exactly one spelling, or two "
                "identical eval sets get two hashes.",
            )
            return None
        try:
            datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ")
        except ValueError:
            self.error("evalset.schema.invalid", path, f"{path} is not a real UTC instant.")
            return None
        return value

    def free_text(self, value: Any, path: str) -> None:
        """Manifest free text is world-readable and immutable: no contact details in it."""
        if not isinstance(value, str):
            return
        if _EMAIL.search(value):
            self.error(
                "evalset.pii_in_free_text",
                path,
                f"{path} looks like it contains an email address. Manifest free text is "
                "world-readable and immutable; use a pseudonymous handle.",
            )
        if _SSN.search(value):
            self.error(
                "evalset.pii_in_free_text",
                path,
                f"{path} looks like it contains a government identifier.",
            )
        if _PHONE.search(value):
            self.error(
                "evalset.pii_in_free_text", path, f"{path} looks like it contains a phone number."
            )

    def sorted_strings(self, value: Any, path: str) -> None:
        """Sorted ascending and deduplicated, so a cosmetic reordering cannot change the hash."""
        fields = self.array(value, path)
        if fields is None:
            return
        previous: str | None = None
        for index, item in enumerate(fields):
            text = self.string(item, f"{path}[{index}]")
            if text is None:
                continue
            if previous is not None and utf16_key(previous) >= utf16_key(text):
                self.error(
                    "evalset.referenced_fields_unsorted",
                    f"{path}[{index}]",
                    f"{path} must be sorted ascending and deduplicated so that a cosmetic "
                    "reordering cannot change eval_set_sha.",
                )
            previous = text
