"""How a setting is read from the environment: the field helpers, the environment source, the
error that lists every bad value, and the names and patterns the fields check against."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, Final, Literal, get_args
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from little_dist.errors import InvalidInputError

Role = Literal["planner", "orchestrator", "worker", "fixer"]
ROLES: Final[tuple[Role, ...]] = get_args(Role)
WorkerPool = Literal["threads", "prefork", "solo"]
BranchWindow = Literal["fleet", "declared"]

_REDIS_SCHEMES: Final = ("redis", "rediss", "unix")
# Celery brokers we can name; KEDA's queue-depth scaling assumes a Redis broker.
_BROKER_SCHEMES: Final = ("redis", "rediss", "sentinel", "amqp", "amqps", "pyamqp", "memory")
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")
_STREAM_NAME = re.compile(r"^\S+$")
_MODULE_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:[A-Za-z_]\w*)?$")
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_REGION = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_MASK: Final = "**********"
_MAX_SHOWN = 80


class SettingsError(InvalidInputError):
    """One or more environment variables hold values the fleet cannot use.

    ``problems`` holds one line per bad value: ``NAME=value: expected ...``.
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = tuple(problems)
        count = len(self.problems)
        noun = "setting" if count == 1 else "settings"
        super().__init__(f"{count} invalid {noun} in the environment:\n" + "\n".join(problems))


def _env(name: str, default: Any, expected: str, **constraints: Any) -> Any:
    """A field read from environment variable ``name``; ``expected`` is said when it is bad."""
    return Field(default, validation_alias=name, description=expected, **constraints)


def _seconds(name: str, default: float, *, allow_zero: bool = False) -> Any:
    bound = {"ge": 0} if allow_zero else {"gt": 0}
    what = "0 or more" if allow_zero else "greater than 0"
    return _env(name, default, f"a number of seconds, {what}", allow_inf_nan=False, **bound)


def _queue(role: str) -> Any:
    return _env(
        f"LITTLE_QUEUE_{role.upper()}",
        f"little.{role}",
        "a queue name: letters, digits, '.', '_', ':' or '-', no spaces",
        pattern=_QUEUE_NAME.pattern,
    )


def mask_url(url: str) -> str:
    """``url`` with the password in its user info replaced by asterisks."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if not password:
        return url
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{user}:{_MASK}@{host}"))


def _scheme_of(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


_GIVEN_ENV: ContextVar[Mapping[str, str] | None] = ContextVar("little_settings_env", default=None)


class _Environment(PydanticBaseSettingsSource):
    """Each field's variable (its validation alias) from one mapping; empty counts as unset."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self._environ = environ

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        name = str(field.validation_alias or field_name)
        return self._environ.get(name) or None, name, False

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for field_name, field in self.settings_cls.model_fields.items():
            value, name, _ = self.get_field_value(field, field_name)
            if value is not None:
                values[name] = value
        return values


class _FromEnvironment(BaseSettings):
    """Fields read from the environment only (see :meth:`settings_customise_sources`)."""

    model_config = SettingsConfigDict(
        case_sensitive=True,
        env_ignore_empty=True,
        extra="ignore",
        frozen=True,
        validate_default=True,
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment only: no .env file, no secrets directory. What the deployment sets
        # (compose, the Kubernetes ConfigMap and Secret) is all there is. load_settings(env)
        # swaps the process environment for its mapping, so a caller's mapping is never mixed
        # with os.environ.
        environ = _GIVEN_ENV.get()
        return (
            init_settings,
            _Environment(settings_cls, os.environ if environ is None else environ),
        )
