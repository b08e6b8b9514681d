"""Conversation compaction (little_dist.harness.compaction, upstream's
conversation-compaction.ts): a long tool loop's older bulky tool results are elided once the
conversation passes the policy's size, deterministically, so a resumed attempt's model calls
match what the first attempt recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from little_dist import define_workflow, model, tool
from little_dist.harness.compaction import (
    DEFAULT_COMPACTION,
    CompactionPolicy,
    compact_conversation,
)
from little_dist.testing import ScriptedModel
from little_dist.world.local import LocalWorld
from tests.lwir_builder import workflow_doc

SMALL = CompactionPolicy(max_chars=1000, keep_recent_messages=2, min_elide_chars=50)


def _conversation(results: list[str]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are careful."},
        {"role": "user", "content": "Do the task."},
    ]
    for index, result in enumerate(results):
        messages.append(
            {"role": "assistant", "tool_calls": [{"id": f"c{index}", "function": {"name": "t"}}]}
        )
        messages.append({"role": "tool", "tool_call_id": f"c{index}", "content": result})
    return messages


def test_a_conversation_under_the_limit_is_sent_as_it_is() -> None:
    messages = _conversation(["x" * 100, "y" * 100])
    compacted = compact_conversation(messages, SMALL)
    assert compacted == messages
    assert all(a is b for a, b in zip(compacted, messages, strict=True))


def test_older_bulky_tool_results_are_elided_and_the_rest_kept() -> None:
    messages = _conversation(["a" * 600, "b" * 20, "c" * 600, "d" * 600])
    compacted = compact_conversation(messages, SMALL)
    assert len(compacted) == len(messages)
    # The system message, the task, the calls themselves and the last two messages are kept.
    for index in (0, 1, 2, 4, 6, 8, 9):
        assert compacted[index] is messages[index]
    assert compacted[3]["content"] == (
        "[context-compacted: 600 chars elided to save context; re-read via tools if needed]"
    )
    assert compacted[3]["tool_call_id"] == "c0"
    assert compacted[5] is messages[5]  # a small result is not worth eliding
    assert compacted[7]["content"].startswith("[context-compacted: 600 chars")
    assert compacted[9]["content"] == "d" * 600  # recent: kept
    # Pure: the same input gives the same output, and the input is untouched.
    assert compact_conversation(messages, SMALL) == compacted
    assert messages[3]["content"] == "a" * 600


def test_the_default_policy_is_upstreams() -> None:
    assert (
        CompactionPolicy(max_chars=250_000, keep_recent_messages=8, min_elide_chars=500)
        == DEFAULT_COMPACTION
    )


@tool
def big(n: int) -> dict[str, str]:
    """A bulky result (60,000 characters)."""
    return {"text": str(n) * 60_000}


LOOP = define_workflow(
    id="compaction.loop",
    description="A model that reads six bulky results in a row.",
    input={"type": "object"},
    output={"type": "string"},
    model=model("scripted/compaction", id="default"),
    tools=[big],
    plan=workflow_doc(
        "compaction.loop",
        [
            {
                "id": "think",
                "uses": "ai.generate",
                "with": {"model": "default", "prompt": "Read six results.", "tools": ["big"]},
                "output": {"mode": "text"},
                "retry": {"maxAttempts": 2},
            }
        ],
        input_schema={"type": "object"},
        output_schema={"type": "string"},
        tools=["big"],
        models=["default"],
    ),
)


def test_a_long_tool_loop_sends_and_records_the_compacted_conversation(tmp_path: Path) -> None:
    script = ScriptedModel()
    chain = script.on(step="think").call_tool("big", {"n": 1})
    for n in range(2, 7):
        chain = chain.then_call_tool("big", {"n": n})
    chain.then_reply_text("read them all")
    world = LocalWorld(tmp_path / "world")
    with script.installed(model="compaction"):
        result = LOOP.run({}, world=world)  # type: ignore[attr-defined]
    assert result.status == "completed" and result.output == "read them all"
    calls = [call for call in script.calls if call.step_path == "think"]
    assert len(calls) == 7

    # Turns 1-5 are under 250k characters; the last two are over, so their oldest results
    # (outside the last eight messages) are elided; the newest are whole.
    def elided(call: Any) -> list[bool]:
        return [
            str(m.get("content", "")).startswith("[context-compacted:")
            for m in call.messages
            if m.get("role") == "tool"
        ]

    assert [any(elided(call)) for call in calls] == [False] * 5 + [True, True]
    assert elided(calls[-1]) == [True, True, False, False, False, False]
    # What the model was sent is what the log recorded for that turn.
    recorded = [
        e.payload for e in world.list_events(result.run_id) if e.type == "harness.model.called"
    ]
    assert len(recorded) == 7
    last = recorded[-1]
    request = (
        last["request"]
        if "requestRef" not in last
        else world.get_artifact(last["requestRef"]).payload
    )
    sent = [m for m in request["messages"] if m.get("role") == "tool"]
    assert [m["content"] for m in sent] == [m["content"] for m in calls[-1].messages
                                           if m.get("role") == "tool"]  # fmt: skip
    assert sent[0]["content"].startswith("[context-compacted: ")


def test_a_retried_attempt_replays_the_compacted_turns_from_the_memo(tmp_path: Path) -> None:
    # The first attempt's last call fails (a provider error, retried); the second attempt
    # rebuilds the same conversation, compacts it the same way, and finds every earlier
    # turn in the memo by its prompt hash: only the failed turn goes to the provider again.
    script = ScriptedModel()
    chain = script.on(step="think").call_tool("big", {"n": 1})
    for n in range(2, 7):
        chain = chain.then_call_tool("big", {"n": n})
    chain.then_raise_error("rate_limit").then_reply_text("read them all")
    world = LocalWorld(tmp_path / "world")
    with script.installed(model="compaction"):
        result = LOOP.run({}, world=world)  # type: ignore[attr-defined]
    assert result.status == "completed" and result.output == "read them all"
    events = world.list_events(result.run_id)
    attempts = [e.payload["attempt"] for e in events if e.type == "StepAttemptStarted"]
    assert attempts == [1, 2]
    calls = [call for call in script.calls if call.step_path == "think"]
    assert len(calls) == 8  # seven in the first attempt, one (the failed turn) in the second
    assert calls[-1].messages == calls[-2].messages  # the same compacted conversation
