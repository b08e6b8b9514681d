"""The settings a process may read on their own: the input limits (``little run``,
``little validate``) and the provider quotas (a model call in process)."""

from __future__ import annotations

from pydantic import field_validator
from pydantic_core import PydanticCustomError

from little_dist.limits import (
    DEFAULT_MAX_INPUT_BYTES,
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_MAX_LWIR_BYTES,
    DEFAULT_MAX_STEPS,
    MAX_JSON_DEPTH_CEILING,
    InputLimits,
)
from little_dist.settings.fields import (
    _env,
    _FromEnvironment,
    _seconds,
)


class LimitSettings(_FromEnvironment):
    """The limits on submitted input (:func:`load_limits` reads these alone: ``little run``
    and ``little validate`` need no fleet settings)."""

    max_input_bytes: int = _env(
        "LITTLE_MAX_INPUT_BYTES",
        DEFAULT_MAX_INPUT_BYTES,
        "a whole number of bytes, 1 or more",
        ge=1,
    )
    max_lwir_bytes: int = _env(
        "LITTLE_MAX_LWIR_BYTES", DEFAULT_MAX_LWIR_BYTES, "a whole number of bytes, 1 or more", ge=1
    )
    max_steps: int = _env(
        "LITTLE_MAX_STEPS", DEFAULT_MAX_STEPS, "a whole number of steps, 1 or more", ge=1
    )
    max_json_depth: int = _env(
        "LITTLE_MAX_JSON_DEPTH",
        DEFAULT_MAX_JSON_DEPTH,
        f"a whole number of levels, 1 to {MAX_JSON_DEPTH_CEILING}",
        ge=1,
        le=MAX_JSON_DEPTH_CEILING,
    )

    @property
    def limits(self) -> InputLimits:
        """The limits on submitted input, for :mod:`little_dist.limits`."""
        return InputLimits(
            max_input_bytes=self.max_input_bytes,
            max_lwir_bytes=self.max_lwir_bytes,
            max_steps=self.max_steps,
            max_json_depth=self.max_json_depth,
        )


class QuotaSettings(_FromEnvironment):
    """The provider quotas (:func:`load_quota_settings` reads these alone: a model call in
    ``little run`` needs no fleet settings)."""

    quotas: str | None = _env(
        "LITTLE_QUOTAS",
        None,
        "quota rules as JSON, or the path of a JSON file (see little_dist.quotas.rules)",
    )
    quota_max_wait: float = _seconds("LITTLE_QUOTA_MAX_WAIT", 60.0, allow_zero=True)
    #: A fleet worker's model call whose quota wait is expected longer than this gives its
    #: slot back (the attempt ends ``quota_wait`` and runs again when the quota is expected).
    quota_give_back_after: float = _seconds("LITTLE_QUOTA_GIVE_BACK_AFTER", 2.0, allow_zero=True)
    quota_lease: float = _seconds("LITTLE_QUOTA_LEASE", 900.0)

    @field_validator("quotas")
    @classmethod
    def _check_quotas(cls, value: str | None) -> str | None:
        if value is not None:
            from little_dist.quotas.rules import QuotaConfigError, parse_quotas

            try:
                parse_quotas(value)
            except QuotaConfigError as exc:
                # Said as it is (not the field's description): which rule, which field, why.
                raise PydanticCustomError("quota_rules", "{reason}", {"reason": str(exc)}) from exc
        return value
