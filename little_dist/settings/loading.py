"""Reading the settings: :func:`load_settings` and the loaders of their parts, and how their
problems are said (one line per bad variable, values masked)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

from pydantic import ValidationError

from little_dist.limits import (
    InputLimits,
)
from little_dist.settings.fields import _GIVEN_ENV, SettingsError
from little_dist.settings.groups import LimitSettings, QuotaSettings
from little_dist.settings.model import _ENV_TO_FIELD, Settings, _shown


def _problems_of(error: ValidationError) -> list[str]:
    problems: list[str] = []
    for detail in error.errors(include_url=False):
        loc = detail["loc"]
        if not loc:
            # The cross-field check: its message already holds finished lines.
            cause = detail.get("ctx", {}).get("error")
            problems.extend(str(cause if cause is not None else detail["msg"]).splitlines())
            continue
        env_name = str(loc[0])
        if detail["type"] == "quota_rules":
            problems.append(f"{env_name}={_shown(env_name, detail['input'])}: {detail['msg']}")
            continue
        field = _ENV_TO_FIELD.get(env_name)
        expected = Settings.model_fields[field].description if field else None
        problems.append(
            f"{env_name}={_shown(env_name, detail['input'])}: expected {expected or detail['msg']}"
        )
    return problems


def load_limits(env: Mapping[str, str] | None = None) -> InputLimits:
    """The limits on submitted input in ``env`` (default: the process environment), alone:
    other variables are not read. Raises :class:`SettingsError` for a bad limit.

    From the process environment, the limits its variables gave last are remembered (by
    their values, read again each time): a workflow tool checks every call's input with
    them, and reading the settings costs ~0.5 ms, which a turn of 1,000 calls felt."""
    if env is None:
        given = tuple(os.environ.get(name) for name in _LIMIT_VARIABLES)
        remembered = _LIMITS_SEEN.get(given)
        if remembered is None:
            remembered = _read_limits(None)
            if len(_LIMITS_SEEN) >= 8:
                _LIMITS_SEEN.clear()  # (a test that tries limits after limits)
            _LIMITS_SEEN[given] = remembered
        return remembered
    return _read_limits(env)


#: The variables :class:`LimitSettings` reads (its fields' names in the environment).
_LIMIT_VARIABLES: Final = tuple(
    str(field.validation_alias) for field in LimitSettings.model_fields.values()
)
#: What :func:`load_limits` read from the process environment, by those variables' values.
_LIMITS_SEEN: dict[tuple[str | None, ...], InputLimits] = {}


def _read_limits(env: Mapping[str, str] | None) -> InputLimits:
    token = _GIVEN_ENV.set(None if env is None else dict(env))
    try:
        return LimitSettings().limits
    except ValidationError as exc:
        raise SettingsError(_problems_of(exc)) from exc
    finally:
        _GIVEN_ENV.reset(token)


def load_quota_settings(env: Mapping[str, str] | None = None) -> QuotaSettings:
    """The quota settings in ``env`` (default: the process environment), alone; from the
    process environment remembered by their variables' values (a model call asks each
    time). Raises :class:`SettingsError` for a bad value."""
    given = _QUOTA_VARIABLES if env is None else ()
    values = tuple(os.environ.get(name) for name in given)
    if env is None and _QUOTAS_SEEN.get(values) is not None:
        return _QUOTAS_SEEN[values]
    token = _GIVEN_ENV.set(None if env is None else dict(env))
    try:
        found = QuotaSettings()
    except ValidationError as exc:
        raise SettingsError(_problems_of(exc)) from exc
    finally:
        _GIVEN_ENV.reset(token)
    if env is None:
        if len(_QUOTAS_SEEN) >= 8:
            _QUOTAS_SEEN.clear()
        _QUOTAS_SEEN[values] = found
    return found


_QUOTA_VARIABLES: Final = tuple(
    str(field.validation_alias) for field in QuotaSettings.model_fields.values()
)
_QUOTAS_SEEN: dict[tuple[str | None, ...], QuotaSettings] = {}


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """The settings in ``env`` (default: the process environment), checked.

    Raises :class:`SettingsError` listing every bad value, one line each.
    """
    token = _GIVEN_ENV.set(None if env is None else dict(env))
    try:
        return Settings()
    except ValidationError as exc:
        raise SettingsError(_problems_of(exc)) from exc
    finally:
        _GIVEN_ENV.reset(token)
