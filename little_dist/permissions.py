"""Runtime tool-call permissions: allow / deny / ask rules over tool names (upstream's
``permission.ts``), and the gate a harness asks before every tool call.

Two layers, as upstream has them. The LWIR ``permissions`` block (``tools``, ``models``,
``secrets``, ``network``) is a *compile-time* contract, checked by :mod:`little_dist.lwir`:
which tools a workflow may bind at all. This module is the *runtime* layer: a ruleset that
gates, or asks approval for, single calls of the tools a step was given. No rules means
allow, so it is opt-in and never surprises.

A rule is upstream's ``{"tool": GLOB, "action": "allow" | "deny" | "ask"}``; ``*`` in the
glob stands for any run of characters, everything else is literal. little-dist adds one
optional field, ``args``: a mapping from a top-level argument name to a glob over its value
(a string as it is, any other JSON value as its canonical JSON); the rule matches a call only
when every named argument is present and matches (``{"tool": "bash", "args": {"command":
"rm *"}, "action": "deny"}``). A rule without ``args`` behaves exactly as upstream's.

Resolution is upstream's: a matching ``deny`` wins (most restrictive first), else a matching
``ask`` asks, else allow. An ``ask`` goes to the approver (``on_ask``, upstream's
``onAsk``), which returns true to allow. With no approver (always so on a fleet worker)
upstream denies; here the call waits for a person instead (:mod:`little_dist.approvals`:
the request is recorded in the run's log, a fleet worker gives its slot back, and ``little
approvals approve|reject`` or ``POST /v1/approvals/{id}`` decides). An ``ask`` rule may
bound that wait, fields little-dist adds (upstream's rule has none): ``timeout`` (a duration
such as ``'30s'``, ``'2h'``, or milliseconds) and ``onTimeout`` (``"deny"``, the default, or
``"allow"``): what happens to the call when nobody decided in time.
:func:`inherit_permissions` gives a sub-run every ``deny`` of its parent.

Pure: no IO, no clock. The harness side (events, the error the model sees) is in
:mod:`little_dist.harness.tool_calls`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from little_dist.canonical import canonical_json, sha256_digest
from little_dist.durations import duration_ms
from little_dist.errors import InvalidInputError

__all__ = [
    "ON_TIMEOUT_ACTIONS",
    "PERMISSION_ACTIONS",
    "Approver",
    "PermissionAction",
    "PermissionDecision",
    "PermissionRule",
    "ToolPermissions",
    "decide_tool_call",
    "evaluate_tool_permission",
    "inherit_permissions",
    "match_tool_glob",
    "matching_rule",
    "tool_permissions",
]

PermissionAction = Literal["allow", "deny", "ask"]
PERMISSION_ACTIONS: tuple[PermissionAction, ...] = ("allow", "deny", "ask")
#: What an ``ask`` rule's ``onTimeout`` may say.
ON_TIMEOUT_ACTIONS: tuple[str, ...] = ("deny", "allow")

#: Upstream's ``onAsk``: gets ``{"tool": name, "args": args}``, returns true to allow.
Approver = Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True)
class PermissionRule:
    """One rule: ``tool`` glob, ``action``, and optional argument globs (``args``); an
    ``ask`` rule may bound a person's decision: ``timeout_ms``, then ``on_timeout``."""

    tool: str
    action: PermissionAction
    args: Mapping[str, str] = field(default_factory=dict)
    #: How long a person may take to decide an ``ask`` (``None``: no limit).
    timeout_ms: int | None = None
    #: What the call gets when nobody decided within ``timeout_ms``.
    on_timeout: Literal["deny", "allow"] = "deny"

    def to_json(self) -> dict[str, Any]:
        """Upstream's rule shape (``args``, ``timeout`` and ``onTimeout`` only when given)."""
        data: dict[str, Any] = {"tool": self.tool, "action": self.action}
        if self.args:
            data["args"] = dict(self.args)
        if self.timeout_ms is not None:
            data["timeout"] = self.timeout_ms
            data["onTimeout"] = self.on_timeout
        return data

    def matches(self, tool_name: str, args: Any) -> bool:
        if not match_tool_glob(self.tool, tool_name):
            return False
        if not self.args:
            return True
        if not isinstance(args, Mapping):
            return False
        for name, pattern in self.args.items():
            if name not in args:
                return False
            value = args[name]
            text = value if isinstance(value, str) else canonical_json(value)
            if not match_tool_glob(pattern, text):
                return False
        return True


@dataclass(frozen=True)
class ToolPermissions:
    """Upstream's ``ToolPermissions``: a ruleset and the approver of ``ask`` decisions."""

    ruleset: tuple[PermissionRule, ...] = ()
    on_ask: Approver | None = None

    def __bool__(self) -> bool:
        return bool(self.ruleset)

    def ruleset_json(self) -> list[dict[str, Any]]:
        return [rule.to_json() for rule in self.ruleset]

    def ruleset_hash(self) -> str:
        """``sha256:`` of the canonical ruleset (recorded in the session manifest)."""
        return sha256_digest(self.ruleset_json())

    def with_approver(self, on_ask: Approver | None) -> ToolPermissions:
        return ToolPermissions(self.ruleset, on_ask)


@dataclass(frozen=True)
class PermissionDecision:
    """How one call was decided: the ruleset's ``action``, the final ``decision``
    (``allow``/``deny``), why (``reason``) and the rule that settled it (if any)."""

    action: PermissionAction
    decision: Literal["allow", "deny"]
    reason: Literal[
        "no_rule", "rule", "approved", "rejected", "no_approver", "approver_failed", "timed_out"
    ]
    rule: PermissionRule | None = None
    #: A person's decision (:mod:`little_dist.approvals`): its id, who and why.
    approval_id: str | None = None
    decided_by: str | None = None
    why: str | None = None

    @property
    def allowed(self) -> bool:
        return self.decision == "allow"

    def message(self, tool_name: str) -> str:
        """The error the model sees for a denied call."""
        if self.reason == "rule":
            assert self.rule is not None
            return (
                f"tool {tool_name!r} was denied by the workflow's permission rules "
                f"(rule {canonical_json(self.rule.to_json())}); do not retry it, choose "
                "another way"
            )
        if self.reason == "no_approver":
            return (
                f"tool {tool_name!r} needs approval (permission rule 'ask') and no approver "
                "is set, so it was denied; do not retry it, choose another way"
            )
        if self.reason == "approver_failed":
            return f"tool {tool_name!r} needs approval and the approver failed, so it was denied"
        if self.approval_id is not None:
            # A person's rejection reads as a rule's deny does: the model reacts the same way.
            who = f" by {self.decided_by}" if self.decided_by else ""
            why = f": {self.why}" if self.why else ""
            if self.reason == "timed_out":
                what = "nobody decided its approval in time (the rule's onTimeout is deny)"
            else:
                what = f"its approval was rejected{who}{why}"
            return (
                f"tool {tool_name!r} was denied by the workflow's permission rules "
                f"(approval {self.approval_id}: {what}); do not retry it, choose another way"
            )
        return f"tool {tool_name!r} was denied by the approver; do not retry it"


@lru_cache(maxsize=512)
def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if ch == "*" else re.escape(ch) for ch in pattern), re.S)


def match_tool_glob(pattern: str, name: str) -> bool:
    """Upstream's ``matchToolGlob``: ``*`` is any run of characters, the rest literal."""
    if pattern == "*":
        return True
    return _glob(pattern).fullmatch(name) is not None


def matching_rule(
    ruleset: Sequence[PermissionRule], tool_name: str, args: Any = None
) -> PermissionRule | None:
    """The rule that settles the call: the first matching ``deny``, else the first
    matching ``ask``, else the first matching ``allow``; ``None`` when none matches."""
    found: dict[str, PermissionRule] = {}
    for rule in ruleset:
        if rule.action not in found and rule.matches(tool_name, args):
            if rule.action == "deny":
                return rule
            found[rule.action] = rule
    return found.get("ask") or found.get("allow")


def evaluate_tool_permission(
    ruleset: Sequence[PermissionRule], tool_name: str, args: Any = None
) -> PermissionAction:
    """Upstream's ``evaluateToolPermission``: deny wins, else ask, else allow."""
    rule = matching_rule(ruleset, tool_name, args)
    return "allow" if rule is None else rule.action


def decide_tool_call(permissions: ToolPermissions, tool_name: str, args: Any) -> PermissionDecision:
    """The decision on one call, asking ``permissions.on_ask`` for an ``ask``."""
    rule = matching_rule(permissions.ruleset, tool_name, args)
    if rule is None:
        return PermissionDecision("allow", "allow", "no_rule")
    if rule.action != "ask":
        return PermissionDecision(rule.action, rule.action, "rule", rule)
    if permissions.on_ask is None:
        return PermissionDecision("ask", "deny", "no_approver", rule)
    try:
        approved = permissions.on_ask({"tool": tool_name, "args": args})
    except Exception:  # an approver that cannot answer does not open the gate
        return PermissionDecision("ask", "deny", "approver_failed", rule)
    if approved is True:
        return PermissionDecision("ask", "allow", "approved", rule)
    return PermissionDecision("ask", "deny", "rejected", rule)


def inherit_permissions(
    parent: Sequence[PermissionRule], child: Sequence[PermissionRule]
) -> tuple[PermissionRule, ...]:
    """Upstream's ``inheritPermissions``: the parent's denies first, then the child's rules,
    so a sub-run can never re-enable a tool its parent denied."""
    return (*(rule for rule in parent if rule.action == "deny"), *child)


def _rule(value: Any, where: str) -> PermissionRule:
    if isinstance(value, PermissionRule):
        return value
    if not isinstance(value, Mapping):
        raise InvalidInputError(
            f"{where}: a rule must be {{'tool': GLOB, 'action': 'allow'|'deny'|'ask'}}, "
            f"got {value!r}"
        )
    extra = set(value) - {"tool", "action", "args", "timeout", "onTimeout"}
    if extra:
        raise InvalidInputError(f"{where}: unknown rule field(s) {sorted(extra)}")
    tool = value.get("tool")
    action = value.get("action")
    if not isinstance(tool, str) or not tool:
        raise InvalidInputError(f"{where}.tool must be a non-empty glob string, got {tool!r}")
    if action not in PERMISSION_ACTIONS:
        raise InvalidInputError(f"{where}.action must be one of allow, deny, ask, got {action!r}")
    args = value.get("args", {})
    if not isinstance(args, Mapping) or not all(
        isinstance(key, str) and key and isinstance(glob, str) for key, glob in args.items()
    ):
        raise InvalidInputError(
            f"{where}.args must map argument names to glob strings, got {args!r}"
        )
    timeout, on_timeout = _approval_bounds(value, action, where)
    return PermissionRule(tool, action, dict(sorted(args.items())), timeout, on_timeout)


def _approval_bounds(
    value: Mapping[str, Any], action: str, where: str
) -> tuple[int | None, Literal["deny", "allow"]]:
    """An ``ask`` rule's ``timeout`` (ms) and ``onTimeout``, checked."""
    timeout, on_timeout = value.get("timeout"), value.get("onTimeout")
    if timeout is None and on_timeout is None:
        return None, "deny"
    if action != "ask":
        raise InvalidInputError(
            f"{where}: timeout and onTimeout bound a person's decision, so only an 'ask' rule "
            f"takes them (this rule's action is {action!r})"
        )
    if timeout is None:
        raise InvalidInputError(f"{where}.onTimeout needs a timeout (e.g. 'timeout': '10m')")
    if isinstance(timeout, str):
        limit = duration_ms(timeout, where, "timeout")
    elif isinstance(timeout, int) and not isinstance(timeout, bool) and timeout > 0:
        limit = timeout
    else:
        raise InvalidInputError(
            f"{where}.timeout must be a duration such as '10m' or a positive whole number of "
            f"milliseconds, got {timeout!r}"
        )
    if on_timeout is None:
        return limit, "deny"
    if on_timeout == "deny" or on_timeout == "allow":
        return limit, on_timeout
    raise InvalidInputError(f"{where}.onTimeout must be 'deny' or 'allow', got {on_timeout!r}")


def tool_permissions(
    value: ToolPermissions | Mapping[str, Any] | Iterable[Any] | None, where: str
) -> ToolPermissions:
    """Read a ``permissions`` option: a :class:`ToolPermissions`, upstream's
    ``{"ruleset": [...], "onAsk"?}`` (``on_ask`` too), or a plain list of rules."""
    if value is None:
        return ToolPermissions()
    if isinstance(value, ToolPermissions):
        return value
    on_ask: Any = None
    if isinstance(value, Mapping):
        extra = set(value) - {"ruleset", "onAsk", "on_ask"}
        if extra:
            raise InvalidInputError(f"{where}: unknown field(s) {sorted(extra)}")
        rules: Any = value.get("ruleset", ())
        on_ask = value.get("onAsk", value.get("on_ask"))
        if on_ask is not None and not callable(on_ask):
            raise InvalidInputError(f"{where}.onAsk must be callable, got {on_ask!r}")
    else:
        rules = value
    if isinstance(rules, str | bytes) or not isinstance(rules, Iterable):
        raise InvalidInputError(f"{where}: the ruleset must be a list of rules, got {rules!r}")
    ruleset = tuple(_rule(item, f"{where}[{index}]") for index, item in enumerate(rules))
    return ToolPermissions(ruleset, on_ask)
