"""The scripted provider, exercised through real ``litellm.completion`` / ``acompletion``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from little_dist.errors import InvalidInputError
from little_dist.testing import (
    ERROR_KINDS,
    SCRIPT_ENV_VAR,
    ScriptedModel,
    ToolCall,
    Usage,
    read_call_log,
)
from little_dist.testing._provider import import_litellm

LOOKUP_TOOL = {
    "type": "function",
    "function": {
        "name": "lookupCustomer",
        "description": "Find a customer by account id.",
        "parameters": {
            "type": "object",
            "properties": {"accountId": {"type": "string"}},
            "required": ["accountId"],
        },
    },
}


@pytest.fixture(scope="module")
def litellm() -> Any:
    return import_litellm()


def meta(step: str, run: str = "run_1") -> dict[str, Any]:
    return {"little": {"stepPath": step, "runId": run}}


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def test_text_reply_by_step(litellm: Any) -> None:
    script = ScriptedModel()
    script.on(step="greet").reply_text("hello there")
    with script.installed():
        response = litellm.completion(
            model="scripted/default", messages=user("hi"), metadata=meta("greet")
        )
    assert isinstance(response, litellm.ModelResponse)
    assert response.choices[0].message.content == "hello there"
    assert response.choices[0].finish_reason == "stop"
    assert response.model == "default"
    assert script.calls[0].step_path == "greet"
    assert script.calls[0].run_id == "run_1"


def test_json_reply_is_serialized_content(litellm: Any) -> None:
    script = ScriptedModel()
    script.on(step="summarize").reply_json({"summary": "all good", "severity": "low"})
    with script.installed():
        response = litellm.completion(
            model="scripted/default", messages=user("sum up"), metadata=meta("summarize")
        )
    assert json.loads(response.choices[0].message.content) == {
        "summary": "all good",
        "severity": "low",
    }


def test_tool_call_round_trip(litellm: Any) -> None:
    script = ScriptedModel()
    script.on(step="triage").call_tool("lookupCustomer", {"accountId": "A1"}).then_reply_text(
        "customer is Ada"
    )
    messages: list[Any] = user("who owns A1?")
    with script.installed():
        first = litellm.completion(
            model="scripted/default",
            messages=messages,
            tools=[LOOKUP_TOOL],
            metadata=meta("triage"),
        )
        assert first.choices[0].finish_reason == "tool_calls"
        call = first.choices[0].message.tool_calls[0]
        assert call.type == "function"
        assert call.function.name == "lookupCustomer"
        assert json.loads(call.function.arguments) == {"accountId": "A1"}
        # The loop appends litellm's own Message object, then the tool result.
        messages.append(first.choices[0].message)
        messages.append({"role": "tool", "tool_call_id": call.id, "content": '{"name":"Ada"}'})
        second = litellm.completion(
            model="scripted/default",
            messages=messages,
            tools=[LOOKUP_TOOL],
            metadata=meta("triage"),
        )
    assert second.choices[0].message.content == "customer is Ada"
    assert second.choices[0].message.tool_calls is None
    sent = script.calls[1]
    assert sent.tool_names == ["lookupCustomer"]
    assert sent.tool_results == [
        {"role": "tool", "tool_call_id": call.id, "content": '{"name":"Ada"}'}
    ]
    assert sent.messages[1]["tool_calls"][0]["function"]["name"] == "lookupCustomer"
    script.assert_all_used()


def test_parallel_tool_calls_and_raw_arguments(litellm: Any) -> None:
    script = ScriptedModel()
    script.on().call_tools(
        [("a", {"x": 1}), ToolCall("b", '{"broken": ', id="fixed-id")], text="thinking"
    )
    with script.installed():
        response = litellm.completion(model="scripted/m", messages=user("go"))
    message = response.choices[0].message
    assert message.content == "thinking"
    assert [c.id for c in message.tool_calls] == ["call_0_0", "fixed-id"]
    assert message.tool_calls[1].function.arguments == '{"broken": '


def test_async_tool_call_round_trip(litellm: Any) -> None:
    script = ScriptedModel()
    script.on(step="triage").call_tool("lookupCustomer", {"accountId": "B2"}).then_reply_json(
        {"done": True}
    )

    async def loop() -> Any:
        messages: list[Any] = user("check B2")
        first = await litellm.acompletion(
            model="scripted/x", messages=messages, tools=[LOOKUP_TOOL], metadata=meta("triage")
        )
        call = first.choices[0].message.tool_calls[0]
        messages += [
            first.choices[0].message,
            {"role": "tool", "tool_call_id": call.id, "content": "ok"},
        ]
        return await litellm.acompletion(
            model="scripted/x", messages=messages, tools=[LOOKUP_TOOL], metadata=meta("triage")
        )

    with script.installed():
        final = asyncio.run(loop())
    assert json.loads(final.choices[0].message.content) == {"done": True}
    assert len(script.calls) == 2


def test_explicit_usage_with_cached_and_reasoning_tokens(litellm: Any) -> None:
    script = ScriptedModel()
    script.on(step="s").reply_text(
        "x", usage=Usage(input=1200, output=80, cached=1000, reasoning=30)
    )
    with script.installed():
        usage = litellm.completion(model="scripted/m", messages=user("u"), metadata=meta("s")).usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (1200, 80, 1280)
    assert usage.prompt_tokens_details.cached_tokens == 1000
    assert usage.completion_tokens_details.reasoning_tokens == 30


def test_estimated_usage_is_deterministic_with_cached_share(litellm: Any) -> None:
    script = ScriptedModel(cached_share=0.5, reasoning_share=0.5)
    script.otherwise().reply_text("a reply of some length", times=None)
    with script.installed():
        first = litellm.completion(model="scripted/m", messages=user("x" * 400)).usage
        second = litellm.completion(model="scripted/m", messages=user("x" * 400)).usage
        longer = litellm.completion(model="scripted/m", messages=user("x" * 800)).usage
    assert first.prompt_tokens == second.prompt_tokens > 100
    assert longer.prompt_tokens > first.prompt_tokens
    assert first.prompt_tokens_details.cached_tokens == first.prompt_tokens // 2
    assert first.completion_tokens == 6  # ceil(22 / 4)
    assert first.completion_tokens_details.reasoning_tokens == 3


def test_usage_rejects_impossible_counts() -> None:
    with pytest.raises(InvalidInputError, match="cached"):
        Usage(input=10, output=1, cached=11)
    with pytest.raises(InvalidInputError, match="reasoning"):
        Usage(input=10, output=1, reasoning=2)


@pytest.mark.parametrize("kind", sorted(ERROR_KINDS))
def test_failures_raise_litellm_exception_types(litellm: Any, kind: str) -> None:
    script = ScriptedModel()
    script.fail(step="flaky", error=kind, message=f"boom {kind}")
    with script.installed(), pytest.raises(getattr(litellm, ERROR_KINDS[kind])) as raised:
        litellm.completion(model="scripted/m", messages=user("x"), metadata=meta("flaky"))
    assert f"boom {kind}" in str(raised.value)


def test_async_failure_then_success(litellm: Any) -> None:
    script = ScriptedModel()
    script.fail(step="flaky", times=2, error="timeout")
    script.on(step="flaky").reply_text("third time lucky")

    async def attempt() -> str:
        response = await litellm.acompletion(
            model="scripted/m", messages=user("x"), metadata=meta("flaky")
        )
        return str(response.choices[0].message.content)

    with script.installed():
        for _ in range(2):
            with pytest.raises(litellm.Timeout):
                asyncio.run(attempt())
        assert asyncio.run(attempt()) == "third time lucky"
    assert [c.reply.description for c in script.calls if c.reply] == [
        "error:timeout",
        "error:timeout",
        "text",
    ]


def test_exception_instance_is_raised(litellm: Any) -> None:
    script = ScriptedModel()
    error = litellm.APIConnectionError(message="cable cut", llm_provider="scripted", model="m")
    script.on().raise_error(error)
    with script.installed(), pytest.raises(litellm.APIConnectionError, match="cable cut"):
        litellm.completion(model="scripted/m", messages=user("x"))


def test_latency_sync(litellm: Any) -> None:
    script = ScriptedModel(latency=0.2)
    script.on().reply_text("slow").then_reply_text("fast", latency=0.0)
    with script.installed():
        started = time.monotonic()
        litellm.completion(model="scripted/m", messages=user("x"))
        slow = time.monotonic() - started
        started = time.monotonic()
        litellm.completion(model="scripted/m", messages=user("x"))
        fast = time.monotonic() - started
    assert slow >= 0.2
    assert fast < slow


def test_latency_async_does_not_block_the_loop(litellm: Any) -> None:
    script = ScriptedModel(latency=0.3)
    script.otherwise().reply_text("ok", times=None)

    async def many() -> list[Any]:
        return await asyncio.gather(
            *(litellm.acompletion(model="scripted/m", messages=user(str(i))) for i in range(5))
        )

    with script.installed():
        asyncio.run(many())  # warm litellm's lazy imports
        started = time.monotonic()
        responses = asyncio.run(many())
        elapsed = time.monotonic() - started
    assert [r.choices[0].message.content for r in responses] == ["ok"] * 5
    assert 0.3 <= elapsed < 1.2  # five 0.3 s calls overlapped, not 1.5 s in a row


def test_routing_by_matcher_model_and_order(litellm: Any) -> None:
    script = ScriptedModel()
    script.on(match=lambda req: "repair" in req.last_user_text).reply_text("repaired", times=None)
    script.on(model="planner").reply_text("plan", times=None)
    script.on(contains="hello").reply_text("hi!", times=None)
    script.otherwise().reply_text("fallback", times=None)
    with script.installed():

        def ask(model: str, text: str) -> str:
            response = litellm.completion(model=f"scripted/{model}", messages=user(text))
            return str(response.choices[0].message.content)

        assert ask("planner", "please repair this") == "repaired"  # first matching rule wins
        assert ask("planner", "design") == "plan"
        assert ask("worker", "hello world") == "hi!"
        assert ask("worker", "anything") == "fallback"
    assert [c.model for c in script.calls] == ["planner", "planner", "worker", "worker"]
    assert len(script.calls_for(model="planner")) == 2


def test_queue_order_and_exhaustion(litellm: Any) -> None:
    script = ScriptedModel()
    script.on(step="s").reply_text("one").then_reply_text("two", times=2)
    script.on(step="other").reply_text("never used")
    with script.installed():
        answers = [
            litellm.completion(model="scripted/m", messages=user("x"), metadata=meta("s"))
            .choices[0]
            .message.content
            for _ in range(3)
        ]
        with pytest.raises(litellm.BadRequestError, match=r"no reply scripted for call #3"):
            litellm.completion(model="scripted/m", messages=user("x"), metadata=meta("s"))
    assert answers == ["one", "two", "two"]
    assert [c.index for c in script.unanswered] == [3]
    with pytest.raises(AssertionError, match=r"^scripted model: unused") as raised:
        script.assert_all_used()
    assert "step='other'" in str(raised.value)
    assert "unanswered: call #3" in str(raised.value)


def test_call_log_records_what_was_sent(litellm: Any) -> None:
    script = ScriptedModel()
    script.otherwise().reply_text("ok", times=None)
    messages: list[Any] = [{"role": "system", "content": "be brief"}, *user("q")]
    with script.installed():
        litellm.completion(
            model="scripted/m",
            messages=messages,
            tools=[LOOKUP_TOOL],
            metadata=meta("a/b", run="run_9"),
            temperature=0.2,
            tool_choice="auto",
        )
    messages.append({"role": "user", "content": "mutated afterwards"})
    (call,) = script.calls
    assert call.messages == [{"role": "system", "content": "be brief"}, *user("q")]
    assert call.tools == [LOOKUP_TOOL]
    assert call.metadata == meta("a/b", run="run_9")
    assert call.params["temperature"] == 0.2
    assert call.params["tool_choice"] == "auto"
    assert call.last_user_text == "q"


def test_thread_safe_queue_consumption(litellm: Any) -> None:
    script = ScriptedModel()
    rule = script.on(step="t")
    for i in range(20):
        rule.reply_text(f"r{i}")
    results: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(4):
            response = litellm.completion(
                model="scripted/m", messages=user("x"), metadata=meta("t")
            )
            with lock:
                results.append(response.choices[0].message.content)

    with script.installed():
        threads = [threading.Thread(target=worker) for _ in range(5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sorted(results) == sorted(f"r{i}" for i in range(20))
    assert sorted(c.index for c in script.calls) == list(range(20))


def test_nested_install_restores_outer_script_and_none_is_clear(litellm: Any) -> None:
    outer, inner = ScriptedModel(), ScriptedModel()
    outer.otherwise().reply_text("outer", times=None)
    inner.otherwise().reply_text("inner", times=None)

    def ask() -> str:
        return str(
            litellm.completion(model="scripted/m", messages=user("x")).choices[0].message.content
        )

    with outer.installed():
        with inner.installed():
            assert ask() == "inner"
        assert ask() == "outer"
    with pytest.raises(litellm.BadRequestError, match="no ScriptedModel is installed"):
        ask()


def test_scripts_installed_per_model_name_answer_side_by_side(litellm: Any) -> None:
    triage, review, anything = ScriptedModel(), ScriptedModel(), ScriptedModel()
    triage.otherwise().reply_text("triage", times=None)
    review.otherwise().reply_text("review", times=None)
    anything.otherwise().reply_text("anything", times=None)

    def ask(name: str) -> str:
        response = litellm.completion(model=f"scripted/{name}", messages=user("x"))
        return str(response.choices[0].message.content)

    with triage.installed(model="triage"), review.installed(model="review"):
        # The later script does not take over the earlier one's model.
        assert (ask("triage"), ask("review")) == ("triage", "review")
        # (other tests' example modules may have installed theirs too)
        served = r"installed for: [^)]*review, [^)]*triage"
        with pytest.raises(litellm.BadRequestError, match=served):
            ask("other")
        with anything.installed():
            # A script for every model, installed last, answers them all until removed.
            assert (ask("triage"), ask("other")) == ("anything", "anything")
        assert ask("triage") == "triage"
    with pytest.raises(InvalidInputError, match="name after 'scripted/'"):
        triage.install(model="scripted/triage")


def test_script_file_round_trip(tmp_path: Path) -> None:
    script = ScriptedModel(latency=0.01, cached_share=0.25, call_log=tmp_path / "log.jsonl")
    script.on(step="s", run="run_1").reply_json({"a": 1}, usage=Usage(10, 2, cached=5))
    script.fail(model="m", times=2, error="rate_limit", message="slow down")
    script.on(contains="tool").call_tool("t", {"k": "v"}, id="c1").then_reply_text(
        "end", times=None
    )
    script.otherwise().reply_text("fallback", times=None)
    path = script.save(tmp_path / "script.json")
    loaded = ScriptedModel.load(path)
    assert loaded.to_dict() == script.to_dict()
    assert loaded.to_dict()["rules"][1] == {
        "model": "m",
        "replies": [{"error": "rate_limit", "message": "slow down", "times": 2}],
    }


def test_script_file_errors_name_the_path() -> None:
    with pytest.raises(InvalidInputError, match=r"\$\.rules\[0\]\.replies\[1\]: unknown scripted"):
        ScriptedModel.from_dict(
            {"rules": [{"step": "s", "replies": [{"text": "ok"}, {"error": "meteor"}]}]}
        )
    with pytest.raises(InvalidInputError, match=r"\$\.rules\[0\]: unknown key\(s\) stepPath"):
        ScriptedModel.from_dict({"rules": [{"stepPath": "s", "replies": []}]})
    with pytest.raises(InvalidInputError, match="match= predicate"):
        script = ScriptedModel()
        script.on(match=lambda req: True).reply_text("x")
        script.to_dict()


@pytest.mark.slow
def test_install_from_env_in_a_worker_process(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    script = ScriptedModel(call_log=log)
    script.on(step="summarize").reply_json({"summary": "from file"}, usage=Usage(100, 5, cached=40))
    script.fail(step="flaky", error="rate_limit")
    path = script.save(tmp_path / "script.json")
    program = textwrap.dedent(
        """
        import json
        from little_dist.testing import install_from_env
        assert install_from_env() is not None
        import litellm
        meta = {"little": {"stepPath": "summarize", "runId": "run_7"}}
        r = litellm.completion(model="scripted/w", messages=[{"role": "user", "content": "x"}],
                               metadata=meta)
        try:
            litellm.completion(model="scripted/w", messages=[{"role": "user", "content": "y"}],
                               metadata={"little": {"stepPath": "flaky"}})
        except litellm.RateLimitError:
            failed = True
        print(json.dumps({"content": r.choices[0].message.content,
                          "cached": r.usage.prompt_tokens_details.cached_tokens,
                          "failed": failed}))
        """
    )
    env = {**os.environ, SCRIPT_ENV_VAR: str(path)}
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"content": '{"summary": "from file"}', "cached": 40, "failed": True}
    records = read_call_log(log)
    assert [(r["stepPath"], r["reply"]) for r in records] == [
        ("summarize", "text"),
        ("flaky", "error:rate_limit"),
    ]
    assert records[0]["runId"] == "run_7"
    assert records[0]["pid"] != os.getpid()


def test_install_from_env_without_variable_does_nothing() -> None:
    from little_dist.testing import install_from_env

    assert install_from_env({}) is None


def test_importing_the_testing_package_does_not_import_litellm() -> None:
    code = "import sys, little_dist.testing; assert 'litellm' not in sys.modules"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
