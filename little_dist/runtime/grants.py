"""What a submitted document may use: the capabilities its workflow registers, never more.

A run's tools, model slots and harnesses come from the process side
(:class:`~little_dist.runtime.Capabilities`: the registered workflow's, found by the LWIR's
``metadata.name``, else the app-wide ones). The document only *selects* among them. Every
place a document names a capability is checked here:

* ``permissions.tools`` and ``permissions.models`` (the document's own allowlists);
* a ``tool.call`` step's ``with.tool``; an ``ai.generate`` step's ``with.model`` and the
  tools it offers its model (``with.tools``); a ``code.run`` step's fixer model
  (``onFailure.fixer.model``); nested steps (a parallel step's) alike;
* the worker harness a compiled version's lock was planned for
  (``capabilityManifest.workerHarness.harnessId``).

Model slots are checked when the capabilities bind any (a workflow always does): a slot
they do not bind would otherwise be passed to litellm as written, a model of the
submitter's choosing. Capabilities that bind none (plain LWIR with no app models) pass a
litellm model string that names its provider (``openai/gpt-4o-mini``) through as written;
any other name (``model.fast``) is a slot nothing registers, refused here before the run
starts rather than sent to litellm, whose error would surface late and misleading.

:func:`check_grants` refuses a document with one line naming the step and the capability,
before a submission stores anything; the runtime refuses the same at an attempt
(:class:`CapabilityError` is a ``runtime_config_error``, never retried) for a version that
reached the log another way.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from little_dist.harness.types import DEFAULT_HARNESS_ID
from little_dist.runtime.capabilities import Capabilities, CapabilityError, is_model_string

if TYPE_CHECKING:
    from little_dist.compiler import WorkflowVersion
    from little_dist.harness.types import HarnessRole

__all__ = ["CapabilityError", "check_grants", "overreach", "registered_names"]

_WORKER_HARNESS_ROLE: Final[HarnessRole] = "worker.ai-generate"


def registered_names(names: Any) -> str:
    """``(registered: a, b)`` as it ends a message (``none`` when there are none)."""
    listed = sorted(str(name) for name in names)
    return f"(registered: {', '.join(listed) or 'none'})"


def _steps(steps: Any, prefix: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    if not isinstance(steps, list):
        return
    for step in steps:
        if not isinstance(step, Mapping):
            continue
        label = f"{prefix}{step.get('id')}"
        yield label, step
        yield from _steps(step.get("steps"), f"{label}.")


def _names(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def overreach(
    lwir: Mapping[str, Any],
    capabilities: Capabilities,
    owner: str,
    lock: Mapping[str, Any] | None = None,
) -> list[str]:
    """One line per capability ``lwir`` (and ``lock``, a compiled version's) names that
    ``capabilities`` do not provide: the steps' first (in document order), then the
    allowlists' (those no step names), then the lock's; ``owner`` is who registers them
    (``"workflow 'support.triage'"``, ``"the app"``)."""
    tools = capabilities.tools
    slots = capabilities.models
    tool_list = registered_names(tools.names())
    slot_list = registered_names(slots)
    problems: list[str] = []
    # What steps named: an allowlist entry for the same name is not said again.
    named: set[tuple[str, str]] = set()

    def tool(name: Any, where: str, *, offered: bool = True) -> None:
        if (where, repr(name)) in named:
            return
        # bash (when enabled) is offered to models, never called by a tool.call step.
        known = capabilities.offers_tool(name) if offered else name in tools
        if not isinstance(name, str) or not known:
            named.add(("permissions.tools names", repr(name)))
            problems.append(f"{where} tool {name!r}, which {owner} does not register {tool_list}")

    def slot(name: Any, where: str) -> None:
        if (where, repr(name)) in named:
            return
        # No slot bound at all: a litellm model string ("openai/gpt-4o-mini") goes to litellm
        # as written (plain LWIR, no app models); a slot name ("model.fast") is unregistered.
        if isinstance(name, str) and (name in slots if slots else is_model_string(name)):
            return
        named.add(("permissions.models names", repr(name)))
        problems.append(f"{where} model slot {name!r}, which {owner} does not register {slot_list}")

    for label, step in _steps(lwir.get("steps")):
        uses = step.get("uses")
        config = step.get("with")
        config = config if isinstance(config, Mapping) else {}
        if uses == "tool.call":
            tool(config.get("tool"), f"step {label!r} calls", offered=False)
        elif uses == "ai.generate":
            slot(config.get("model"), f"step {label!r} uses")
            for name in _names(config.get("tools")):
                tool(name, f"step {label!r} offers its model")
        on_failure = step.get("onFailure")
        fixer = on_failure.get("fixer") if isinstance(on_failure, Mapping) else None
        if isinstance(fixer, Mapping) and "model" in fixer:
            slot(fixer.get("model"), f"step {label!r} fixes its code with")
    permissions = lwir.get("permissions")
    if isinstance(permissions, Mapping):
        for name in _names(permissions.get("tools")):
            tool(name, "permissions.tools names", offered=False)
        for name in _names(permissions.get("models")):
            slot(name, "permissions.models names")
    manifest = lock.get("capabilityManifest") if isinstance(lock, Mapping) else None
    harness = manifest.get("workerHarness") if isinstance(manifest, Mapping) else None
    if isinstance(harness, Mapping) and "harnessId" in harness:
        claimed = harness.get("harnessId")
        registered = capabilities.harness_registry().harness_for(_WORKER_HARNESS_ROLE)
        found = getattr(registered, "harness_id", None)
        # (as a definition's snapshot names a harness without an id)
        ours = found if isinstance(found, str) and found else DEFAULT_HARNESS_ID
        if claimed != ours:
            problems.append(
                f"the version was planned for worker harness {claimed!r}, which {owner} "
                f"does not register (registered: {ours})"
            )
    return problems


def check_grants(
    document: WorkflowVersion | Mapping[str, Any], capabilities: Capabilities, owner: str
) -> None:
    """Raise :class:`CapabilityError` (one line: the first problem, and how many more) when
    ``document`` (an LWIR document or a compiled version) names a capability that
    ``capabilities`` do not provide (see the module docstring)."""
    from little_dist.compiler import WorkflowVersion

    if isinstance(document, WorkflowVersion):
        problems = overreach(document.lwir, capabilities, owner, document.lock)
    else:
        problems = overreach(document, capabilities, owner)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CapabilityError(problems[0] + more)
