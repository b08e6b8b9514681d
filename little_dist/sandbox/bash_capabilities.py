"""The bash tool's capabilities as a workflow declares them, and upstream's normal form.

``define_workflow(bash=...)`` takes upstream's ``BashCapabilities``: ``network`` (``False``,
``True`` for HTTPS ``GET``/``HEAD`` to port 443 of public hosts, or an allowlist object),
``python`` and ``javascript`` (both on unless turned off). :meth:`BashCapabilities.normalized`
is upstream's ``normalizeBashCapabilities``: it is the ``bashConfig`` of every workflow
definition snapshot (so it is part of the workflowDefinitionHash) and the ``bash`` entry of
the planner's capability manifest. Pure: no IO.

The allowlist keeps upstream's wire format (``allow`` becomes ``allowedUrlPrefixes``, and so
on), and each entry is parsed when the workflow is defined
(:func:`~little_dist.sandbox.allowlist.parse_entry`: scheme, host, port, path, compared as
values, never as string prefixes): an entry that is not such a URL — userinfo, a wildcard
other than a leading ``*.``, a port outside 1-65535 — is an error naming it, as is a method
that is not an HTTP token or a ``timeoutMs``/``maxResponseSize``/``maxRedirects`` that is not
a non-negative number.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from little_dist.errors import InvalidInputError
from little_dist.sandbox.allowlist import AllowlistError, parse_entry

__all__ = ["BashCapabilities", "bash_capabilities"]

_NETWORK_KEYS: Final = {
    "allow": "allowedUrlPrefixes",
    "methods": "allowedMethods",
    "maxRedirects": "maxRedirects",
    "timeoutMs": "timeoutMs",
    "maxResponseSize": "maxResponseSize",
    "dangerouslyAllowFullInternetAccess": "dangerouslyAllowFullInternetAccess",
}

_TOKEN: Final = frozenset(
    "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)


@dataclass(frozen=True, slots=True)
class BashCapabilities:
    """What the bash tool of a workflow's roles may do (upstream's names)."""

    network: bool | Mapping[str, Any] = False
    python: bool = True
    javascript: bool = True

    def normalized(self) -> dict[str, Any]:
        """Upstream's ``normalizeBashCapabilities`` of these capabilities."""
        return {
            "network": _normalized_network(self.network),
            "python": self.python,
            "javascript": self.javascript,
        }


def bash_capabilities(value: object, where: str = "bash") -> BashCapabilities:
    """``None``, a :class:`BashCapabilities` or upstream's object form, checked."""
    if value is None:
        return BashCapabilities()
    if isinstance(value, BashCapabilities):
        checked = value
    elif isinstance(value, Mapping):
        unknown = sorted(set(value) - {"network", "python", "javascript"})
        if unknown:
            raise InvalidInputError(
                f"{where}: unknown capability {unknown[0]!r} (known: network, python, javascript)"
            )
        checked = BashCapabilities(
            network=value.get("network", False),
            python=value.get("python", True),
            javascript=value.get("javascript", True),
        )
    else:
        raise InvalidInputError(
            f"{where}: expected BashCapabilities or a dict of network/python/javascript, "
            f"got {type(value).__name__}"
        )
    for name in ("python", "javascript"):
        if not isinstance(getattr(checked, name), bool):
            raise InvalidInputError(f"{where}.{name}: expected true or false")
    _normalized_network(checked.network, where)
    return checked


def _normalized_network(network: object, where: str = "bash") -> Any:
    if network is False:
        return False
    if network is True:
        return {
            "allowedUrlPrefixes": ["https://"],
            "allowedMethods": ["GET", "HEAD"],
            "denyPrivateRanges": True,
        }
    if not isinstance(network, Mapping):
        raise InvalidInputError(f"{where}.network: expected true, false or an allowlist object")
    unknown = sorted(set(network) - set(_NETWORK_KEYS) - {"denyPrivateRanges"})
    if unknown:
        raise InvalidInputError(f"{where}.network: unknown field {unknown[0]!r}")
    normal: dict[str, Any] = {}
    for given, name in _NETWORK_KEYS.items():
        if network.get(given) is not None:
            value = network[given]
            if given in ("allow", "methods"):
                if not isinstance(value, list | tuple) or not all(
                    isinstance(item, str) for item in value
                ):
                    raise InvalidInputError(f"{where}.network.{given}: expected a list of strings")
                _check_items(given, value, where)
                value = sorted(value)
            elif given in ("maxRedirects", "timeoutMs", "maxResponseSize"):
                if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                    raise InvalidInputError(
                        f"{where}.network.{given}: expected a non-negative number"
                    )
            elif not isinstance(value, bool):
                raise InvalidInputError(f"{where}.network.{given}: expected true or false")
            normal[name] = value
    deny = network.get("denyPrivateRanges", True)
    if not isinstance(deny, bool):
        raise InvalidInputError(f"{where}.network.denyPrivateRanges: expected true or false")
    normal["denyPrivateRanges"] = deny
    return normal


def _check_items(given: str, items: Any, where: str) -> None:
    for index, item in enumerate(items):
        if given == "allow":
            try:
                parse_entry(item)
            except AllowlistError as exc:
                raise InvalidInputError(f"{where}.network.allow[{index}]: {exc}") from None
        elif not item or not set(item) <= _TOKEN:
            raise InvalidInputError(
                f"{where}.network.methods[{index}]: {item!r} is not an HTTP method"
            )
