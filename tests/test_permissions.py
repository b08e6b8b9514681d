"""Runtime tool-call permissions: upstream's allow / deny / ask rules (plus argument globs),
decided before every call, each decision recorded, a denial an error the model sees."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from little_dist import define_workflow, model, run_workflow
from little_dist.errors import InvalidInputError
from little_dist.event_types import typed
from little_dist.harness import HarnessContext, HarnessRegistry, ToolCallError
from little_dist.permissions import (
    PermissionRule,
    ToolPermissions,
    evaluate_tool_permission,
    inherit_permissions,
    match_tool_glob,
    tool_permissions,
)
from little_dist.testing import ScriptedModel, ToolCall
from little_dist.tools import Tool, tool
from little_dist.world.in_process import MemoryWorld
from little_dist.world.local import LocalWorld
from tests.harness_helpers import RUN, ai_step, execute, make_ctx, of_type, tool_step


def rules(*items: dict[str, Any]) -> tuple[PermissionRule, ...]:
    return tool_permissions(list(items), "test").ruleset


# -- the pure rules (upstream's permission.test.ts, and the argument globs) -----------------


def test_no_matching_rule_allows() -> None:
    assert evaluate_tool_permission((), "bash") == "allow"
    assert evaluate_tool_permission(rules({"tool": "run_workflow", "action": "deny"}), "bash") == (
        "allow"
    )


def test_deny_wins_over_a_broad_allow_and_ask_over_allow() -> None:
    ruleset = rules(
        {"tool": "*", "action": "allow"},
        {"tool": "bash", "action": "deny"},
        {"tool": "run_*", "action": "ask"},
    )
    assert evaluate_tool_permission(ruleset, "bash") == "deny"
    assert evaluate_tool_permission(ruleset, "lookup") == "allow"
    assert evaluate_tool_permission(ruleset, "run_workflow") == "ask"
    # Order does not matter: a deny listed after an ask still wins.
    late_deny = rules({"tool": "run_*", "action": "ask"}, {"tool": "run_*", "action": "deny"})
    assert evaluate_tool_permission(late_deny, "run_x") == "deny"


def test_globs_are_star_only_everything_else_literal() -> None:
    assert match_tool_glob("*", "anything")
    assert match_tool_glob("bash*", "bash.run")
    assert match_tool_glob("run_workflow", "run_workflow")
    assert not match_tool_glob("run_workflow", "plan_workflow")
    assert not match_tool_glob("a.b", "axb")  # '.' is literal
    assert not match_tool_glob("a?", "ab")  # so is '?'


def test_argument_globs_match_named_arguments_only() -> None:
    ruleset = rules(
        {"tool": "bash", "args": {"cmd": "rm *"}, "action": "deny"},
        {"tool": "lookup", "args": {"account_id": "A*", "limit": "1*"}, "action": "ask"},
    )
    assert evaluate_tool_permission(ruleset, "bash", {"cmd": "rm -rf /"}) == "deny"
    assert evaluate_tool_permission(ruleset, "bash", {"cmd": "ls; rm x"}) == "allow"
    assert evaluate_tool_permission(ruleset, "bash", {}) == "allow"  # argument absent
    # Non-string values match as their canonical JSON; every named argument must match.
    assert evaluate_tool_permission(ruleset, "lookup", {"account_id": "A1", "limit": 10}) == "ask"
    assert evaluate_tool_permission(ruleset, "lookup", {"account_id": "B1", "limit": 10}) == (
        "allow"
    )


def test_a_sub_run_keeps_its_parents_denies() -> None:
    parent = rules({"tool": "bash", "action": "deny"}, {"tool": "x", "action": "allow"})
    child = rules({"tool": "*", "action": "allow"})
    merged = inherit_permissions(parent, child)
    assert evaluate_tool_permission(merged, "bash") == "deny"
    assert evaluate_tool_permission(merged, "lookup") == "allow"
    assert len(merged) == 2  # the parent's allow is not inherited


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ([{"tool": "bash", "action": "block"}], r"test\[0\]\.action must be one of"),
        ([{"tool": "", "action": "deny"}], r"test\[0\]\.tool must be a non-empty glob"),
        ([{"tool": "bash", "action": "deny", "when": 1}], r"unknown rule field\(s\) \['when'\]"),
        ([{"tool": "bash", "action": "deny", "args": {"cmd": 3}}], r"\.args must map"),
        ("bash", "must be a list of rules"),
        ({"ruleset": [], "onAsk": 3}, r"onAsk must be callable"),
        ([{"tool": "x", "action": "deny", "timeout": "1m"}], r"only an 'ask' rule takes them"),
        ([{"tool": "x", "action": "ask", "timeout": "soon"}], r"timeout must be a duration"),
        ([{"tool": "x", "action": "ask", "timeout": -1}], r"positive whole number"),
        ([{"tool": "x", "action": "ask", "onTimeout": "deny"}], r"onTimeout needs a timeout"),
        (
            [{"tool": "x", "action": "ask", "timeout": "1s", "onTimeout": "maybe"}],
            r"onTimeout must be 'deny' or 'allow'",
        ),
    ],
)
def test_bad_rules_are_refused_naming_where(given: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        tool_permissions(given, "test")


def test_upstreams_shape_with_an_approver_is_read() -> None:
    def approve(request: Any) -> bool:
        return True

    read = tool_permissions({"ruleset": [{"tool": "x", "action": "ask"}], "onAsk": approve}, "t")
    assert read.ruleset == (PermissionRule("x", "ask"),) and read.on_ask is approve


# -- the gate in the harness's tool loop -----------------------------------------------------


class Calls:
    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []


def make_tools(calls: Calls) -> list[Tool]:
    @tool
    def lookup(account_id: str) -> dict[str, Any]:
        """Find a customer."""
        calls.seen.append(("lookup", {"account_id": account_id}))
        return {"account": account_id, "name": "Ada"}

    @tool
    def refund(amount: int) -> str:
        """Refund money (a side effect)."""
        calls.seen.append(("refund", {"amount": amount}))
        return "refunded"

    return [lookup, refund]


def gated_ctx(world: MemoryWorld, calls: Calls, permissions: ToolPermissions) -> HarnessContext:
    ctx = make_ctx(world, step_path="triage", tools=make_tools(calls))
    return dataclasses.replace(ctx, permissions=permissions)


def run_refund_then_lookup(
    scripted_model: ScriptedModel, permissions: ToolPermissions, world: MemoryWorld | None = None
) -> tuple[Calls, MemoryWorld, Any]:
    scripted_model.on(step="triage").call_tools(
        [ToolCall("refund", {"amount": 5}, id="r1"), ToolCall("lookup", {"account_id": "A1"})]
    ).then_reply_text("handled")
    world, calls = world or MemoryWorld(), Calls()
    ctx = gated_ctx(world, calls, permissions)
    result = HarnessRegistry().run_step(execute(ai_step("triage"), "refund A1"), ctx)
    assert result.output == "handled"  # the loop went on past any denial
    return calls, world, result


def decisions(world: MemoryWorld) -> list[dict[str, Any]]:
    return [e.payload for e in of_type(world.list_events(RUN), "harness.permission.decided")]


def test_an_allowed_call_runs_and_its_decision_is_recorded(scripted_model: ScriptedModel) -> None:
    permissions = tool_permissions([{"tool": "*", "action": "allow"}], "t")
    calls, world, _ = run_refund_then_lookup(scripted_model, permissions)
    assert [name for name, _ in calls.seen] == ["refund", "lookup"]
    recorded = decisions(world)
    assert [(d["toolName"], d["action"], d["decision"], d["reason"]) for d in recorded] == [
        ("refund", "allow", "allow", "rule"),
        ("lookup", "allow", "allow", "rule"),
    ]
    assert recorded[0]["rule"] == {"tool": "*", "action": "allow"}
    assert recorded[0]["callId"] == "tool:triage:1:1" and recorded[0]["turn"] == 1
    for event in world.list_events(RUN):
        if not event.type.startswith("little."):
            typed(event)  # every event in its catalogued shape


def test_a_denied_call_is_not_made_and_the_model_sees_why(scripted_model: ScriptedModel) -> None:
    permissions = tool_permissions([{"tool": "refund", "action": "deny"}], "t")
    calls, world, _ = run_refund_then_lookup(scripted_model, permissions)
    assert calls.seen == [("lookup", {"account_id": "A1"})]  # refund never ran
    seen = json.loads(scripted_model.calls[1].tool_results[0]["content"])
    assert "denied by the workflow's permission rules" in seen["error"]
    assert '{"action":"deny","tool":"refund"}' in seen["error"]
    events = world.list_events(RUN)
    failed = of_type(events, "harness.tool_call.failed")
    assert len(failed) == 1
    assert failed[0].payload["error"]["causeCode"] == "permission_denied"
    assert failed[0].payload["error"]["retriable"] is False
    recorded = decisions(world)
    assert [(d["toolName"], d["decision"], d["reason"]) for d in recorded] == [
        ("refund", "deny", "rule"),
        ("lookup", "allow", "no_rule"),
    ]
    # The decision sits between the call's start and its failure.
    order = [e.type for e in events if e.payload.get("callId") == "tool:triage:1:1"]
    assert order[:3] == [
        "harness.tool_call.started",
        "harness.permission.decided",
        "harness.tool_call.failed",
    ]
    for event in events:
        if not event.type.startswith("little."):
            typed(event)


def test_ask_goes_to_the_approver_with_the_tool_and_its_arguments(
    scripted_model: ScriptedModel,
) -> None:
    asked: list[Any] = []

    def approve(request: Any) -> bool:
        asked.append(dict(request))
        return True

    permissions = tool_permissions({"ruleset": [{"tool": "re*", "action": "ask"}]}, "t")
    calls, world, _ = run_refund_then_lookup(scripted_model, permissions.with_approver(approve))
    assert asked == [{"tool": "refund", "args": {"amount": 5}}]  # lookup was not asked about
    assert [name for name, _ in calls.seen] == ["refund", "lookup"]
    first = decisions(world)[0]
    assert (first["action"], first["decision"], first["reason"]) == ("ask", "allow", "approved")


@pytest.mark.parametrize("answer", [False, "yes", RuntimeError("approver down")])
def test_ask_refused_by_the_approver_is_denied(scripted_model: ScriptedModel, answer: Any) -> None:
    def approver(request: Any) -> Any:
        if isinstance(answer, Exception):
            raise answer
        return answer  # only True approves; "yes" does not

    permissions = ToolPermissions((PermissionRule("refund", "ask"),), approver)
    calls, world, _ = run_refund_then_lookup(scripted_model, permissions)
    assert [name for name, _ in calls.seen] == ["lookup"]
    reason = "approver_failed" if isinstance(answer, Exception) else "rejected"
    assert decisions(world)[0]["reason"] == reason
    assert decisions(world)[0]["decision"] == "deny"


def test_ask_without_an_approver_waits_for_a_person_then_its_deadline_denies(
    scripted_model: ScriptedModel,
) -> None:
    # No approver function: the call waits for a person (little_dist.approvals); nobody
    # decides within the rule's timeout, so its onTimeout (deny, the default) applies.
    permissions = tool_permissions([{"tool": "refund", "action": "ask", "timeout": 50}], "t")
    calls, world, _ = run_refund_then_lookup(scripted_model, permissions)
    assert [name for name, _ in calls.seen] == ["lookup"]
    assert decisions(world)[0]["reason"] == "timed_out"
    seen = json.loads(scripted_model.calls[1].tool_results[0]["content"])
    assert "nobody decided its approval in time" in seen["error"]


def test_argument_rules_and_precedence_in_the_loop(scripted_model: ScriptedModel) -> None:
    scripted_model.on(step="triage").call_tools(
        [
            ToolCall("refund", {"amount": 5}),
            ToolCall("refund", {"amount": 500}),
            ToolCall("lookup", {"account_id": "VIP-1"}),
            ToolCall("lookup", {"account_id": "A1"}),
        ]
    ).then_reply_text("ok")
    asked: list[Any] = []
    permissions = tool_permissions(
        [
            {"tool": "*", "action": "allow"},
            {"tool": "refund", "args": {"amount": "5*"}, "action": "ask"},
            {"tool": "refund", "args": {"amount": "500"}, "action": "deny"},
            {"tool": "lookup", "args": {"account_id": "VIP-*"}, "action": "deny"},
        ],
        "t",
    ).with_approver(lambda request: asked.append(request) or True)
    world, calls = MemoryWorld(), Calls()
    ctx = gated_ctx(world, calls, permissions)
    HarnessRegistry().run_step(execute(ai_step("triage"), "go"), ctx)
    # 500 matches the ask and the deny: the deny wins and the approver is not asked.
    assert [(d["action"], d["decision"]) for d in decisions(world)] == [
        ("ask", "allow"),
        ("deny", "deny"),
        ("deny", "deny"),
        ("allow", "allow"),
    ]
    assert asked == [{"tool": "refund", "args": {"amount": 5}}]
    assert calls.seen == [("refund", {"amount": 5}), ("lookup", {"account_id": "A1"})]


def test_a_tool_call_step_denied_fails_without_retry() -> None:
    world, calls = MemoryWorld(), Calls()
    ctx = make_ctx(world, step_path="pay", role="worker.tool-call", tools=make_tools(calls))
    ctx = dataclasses.replace(ctx, permissions=ToolPermissions((PermissionRule("refund", "deny"),)))
    task = execute(tool_step("pay", "refund"), {"amount": 5})
    with pytest.raises(ToolCallError) as caught:
        HarnessRegistry().run_step(task, ctx)
    assert caught.value.cause_code == "permission_denied" and caught.value.retriable is False
    assert calls.seen == []
    assert decisions(world)[0]["caller"] == "code" and "turn" not in decisions(world)[0]


def test_without_rules_nothing_is_decided_or_recorded(scripted_model: ScriptedModel) -> None:
    calls, world, _ = run_refund_then_lookup(scripted_model, ToolPermissions())
    assert len(calls.seen) == 2 and decisions(world) == []


# -- define_workflow / run_workflow ----------------------------------------------------------


def refund_plan() -> dict[str, Any]:
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "refunds", "version": "0.1.0-alpha"},
        "input": {"schema": {"type": "object"}},
        "output": {"schema": {"type": "string"}},
        "permissions": {
            "tools": ["refund", "lookup"],
            "models": ["default"],
            "secrets": [],
            "network": [],
        },
        "steps": [
            {
                "id": "triage",
                "uses": "ai.generate",
                "with": {"model": "default", "prompt": "Refund A1", "tools": ["refund", "lookup"]},
                "output": {"mode": "text"},
            }
        ],
    }


def refund_workflow(calls: Calls, **options: Any) -> Any:
    return define_workflow(
        id="refunds",
        input={"type": "object"},
        output={"type": "string"},
        model=model("scripted/refunds", id="default"),
        tools=make_tools(calls),
        plan=refund_plan(),
        **options,
    )


def test_run_workflow_takes_the_workflows_rules_and_an_approver(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    scripted_model.on(step="triage").call_tools(
        [ToolCall("refund", {"amount": 5}), ToolCall("lookup", {"account_id": "A1"})]
    ).then_reply_text("done")
    calls = Calls()
    workflow = refund_workflow(calls, permissions=[{"tool": "refund", "action": "ask"}])
    asked: list[Any] = []
    world = LocalWorld(tmp_path / "data")
    result = run_workflow(
        workflow,
        {},
        world=world,
        # The run's own rules come after the workflow's: a deny there still wins.
        permissions=[{"tool": "lookup", "action": "deny"}],
        on_ask=lambda request: asked.append(request) or True,
    )
    assert result.output == "done"
    assert calls.seen == [("refund", {"amount": 5})]
    assert asked == [{"tool": "refund", "args": {"amount": 5}}]
    events = world.list_events(result.run_id)
    started = of_type(events, "harness.session.started")[0].payload
    expected = ToolPermissions(
        (PermissionRule("refund", "ask"), PermissionRule("lookup", "deny"))
    ).ruleset_hash()
    assert started["manifest"]["permissionsHash"] == expected


def test_a_run_approver_given_without_rules_answers_the_workflows_ask(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    # {"ruleset": [], "onAsk": fn} as the run's permissions: no rules of its own (a falsy
    # ToolPermissions), only the approver of the workflow's `ask`.
    scripted_model.on(step="triage").call_tools(
        [ToolCall("refund", {"amount": 5})]
    ).then_reply_text("done")
    calls = Calls()
    workflow = refund_workflow(calls, permissions=[{"tool": "refund", "action": "ask"}])
    asked: list[Any] = []
    result = run_workflow(
        workflow,
        {},
        world=LocalWorld(tmp_path / "data"),
        permissions={"ruleset": [], "onAsk": lambda request: asked.append(request) or True},
    )
    assert result.output == "done"
    assert asked == [{"tool": "refund", "args": {"amount": 5}}]
    assert calls.seen == [("refund", {"amount": 5})]


def test_rules_stay_out_of_the_definition_hash_and_bad_options_are_refused() -> None:
    calls = Calls()
    plain = refund_workflow(calls)
    ruled = refund_workflow(calls, permissions=[{"tool": "refund", "action": "deny"}])
    # Upstream keeps runtime rules out of workflowDefinitionHash (they are run options).
    assert plain.definition_hash() == ruled.definition_hash()
    assert ruled.capabilities().permissions == ToolPermissions((PermissionRule("refund", "deny"),))
    assert plain.capabilities().permissions is None
    with pytest.raises(InvalidInputError, match=r"workflow 'refunds': permissions\[0\]\.action"):
        refund_workflow(calls, permissions=[{"tool": "refund", "action": "nope"}])
    with pytest.raises(InvalidInputError, match=r"run_workflow\(on_ask=\.\.\.\)"):
        refund_workflow(calls, permissions={"ruleset": [], "onAsk": lambda request: True})


def test_the_bash_tool_is_governed_by_argument_rules(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    from tests.bash_fleet_app import shell_plan

    scripted_model.on(step="shell").call_tool(
        "bash", {"cmd": "rm -rf /mnt/scratch"}
    ).then_call_tool("bash", {"cmd": "echo fine"}).then_reply_text("done")
    workflow = define_workflow(
        id="bash.ruled",
        input={"type": "object"},
        output={"type": "string"},
        model=model("scripted/bash", id="default"),
        plan=shell_plan("bash.ruled"),
        bash={},
        permissions=[{"tool": "bash", "args": {"cmd": "rm *"}, "action": "deny"}],
    )
    world = LocalWorld(tmp_path / "data")
    result = run_workflow(workflow, {}, world=world)
    assert result.output == "done"
    first = json.loads(scripted_model.calls[1].tool_results[-1]["content"])
    assert "denied by the workflow's permission rules" in first["error"]
    second = json.loads(scripted_model.calls[2].tool_results[-1]["content"])
    assert second["stdout"] == "fine\n"
    events = world.list_events(result.run_id)
    # Only the allowed command reached the sandbox.
    commands = of_type(events, "harness.runtime.command.started")
    assert [e.payload["command"] for e in commands] == ["echo fine"]
    assert [
        (e.payload["decision"], e.payload.get("rule"))
        for e in of_type(events, "harness.permission.decided")
    ] == [
        ("deny", {"tool": "bash", "action": "deny", "args": {"cmd": "rm *"}}),
        ("allow", None),
    ]
