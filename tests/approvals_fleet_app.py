"""The ``--app`` module of the approvals fleet tests (``tests/test_approvals_fleet.py``);
fleet workers import it, so it imports nothing from pytest.

Each workflow is one ``tool.call`` step calling ``refund`` under a permission rule:
``approvals.ask`` (an ``ask`` with no deadline: waits for a person), ``approvals.deny`` (a
rule's deny, to compare a rejection with), ``approvals.allow-later`` and
``approvals.deny-later`` (an ``ask`` whose 2 s deadline allows, or denies). ``approvals.quick``
is other work for the same fleet (a ``note`` call, no rule).
"""

from __future__ import annotations

from typing import Any

from little_dist import define_workflow, model
from little_dist.tools import tool
from tests.lwir_builder import tool_step, workflow_doc

__all__ = ["allow_later", "ask", "deny", "deny_later", "note", "quick", "refund"]

#: Never called: the plans are fixed and call tools only.
_SLOT = model("scripted/approvals", id="default", max_tokens=16)


@tool
def refund(account: str, amount: int) -> dict[str, Any]:
    """Refund ``amount`` to ``account`` (the side effect a person approves)."""
    return {"refunded": amount, "account": account}


@tool
def note(text: str) -> dict[str, Any]:
    """Answer ``text`` (work that needs no approval)."""
    return {"noted": text}


def _refund(workflow_id: str, rule: dict[str, Any]) -> Any:
    return define_workflow(
        id=workflow_id,
        description="One refund under a permission rule.",
        input={"type": "object"},
        output={"type": "object"},
        model=_SLOT,
        tools=[refund],
        permissions=[{"tool": "refund", **rule}],
        plan=workflow_doc(
            workflow_id, [tool_step("pay", "refund", {"account": "acme-42", "amount": 42})]
        ),
    )


ask = _refund("approvals.ask", {"action": "ask"})
deny = _refund("approvals.deny", {"action": "deny"})
allow_later = _refund(
    "approvals.allow-later", {"action": "ask", "timeout": "2s", "onTimeout": "allow"}
)
deny_later = _refund("approvals.deny-later", {"action": "ask", "timeout": "2s"})

quick = define_workflow(
    id="approvals.quick",
    description="Work that needs no approval.",
    input={"type": "object"},
    output={"type": "object"},
    model=_SLOT,
    tools=[note],
    plan=workflow_doc("approvals.quick", [tool_step("jot", "note", {"text": "hello"})]),
)
