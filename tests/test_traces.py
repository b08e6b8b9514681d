"""Runs as OpenTelemetry traces (in process, an in-memory span exporter): one trace per run
whose id is derived from the run id, a span per step attempt, per model call (GenAI
attributes: model, tokens, cost) and per tool call, each a child of its attempt's span."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from little_dist import run_workflow
from little_dist.authoring.errors import RunFailedError
from little_dist.observability import disable_tracing, enable_tracing, run_trace_id
from little_dist.world.in_process import MemoryWorld
from tests.metrics_fleet_app import USAGE, broken, build_script, fan


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    enable_tracing(spans)
    try:
        yield spans
    finally:
        disable_tracing()


def test_each_run_is_one_trace_with_attempt_model_and_tool_spans(
    exporter: InMemorySpanExporter,
) -> None:
    keys = ["a", "b", "c"]
    with build_script().installed():
        first = run_workflow(fan, {"keys": keys}, world=MemoryWorld())
        second = run_workflow(fan, {"keys": ["d"]}, world=MemoryWorld())
    spans = exporter.get_finished_spans()
    by_trace: dict[int, list[object]] = {}
    for span in spans:
        assert span.context is not None
        by_trace.setdefault(span.context.trace_id, []).append(span)
    # One trace per run, its id derived from the run id (so every fleet worker shares it).
    assert set(by_trace) == {run_trace_id(first.run_id), run_trace_id(second.run_id)}

    mine = [s for s in spans if s.context and s.context.trace_id == run_trace_id(first.run_id)]
    attempts = {s.attributes["little.step.path"]: s for s in mine if s.name.startswith("step ")}
    # (the parallel step itself is the engine's, not an attempt on a worker)
    assert set(attempts) == {"prep", *(f"fan[{k}].ask" for k in keys)}, sorted(attempts)
    assert attempts["prep"].attributes["little.step.kind"] == "tool.call"
    assert attempts["prep"].attributes["little.step.outcome"] == "completed"

    models = [s for s in mine if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(models) == len(keys)
    for span in models:
        assert span.name == "chat gpt-4o-mini"
        assert span.attributes["gen_ai.provider.name"] == "openai"
        assert span.attributes["gen_ai.request.model"] == "gpt-4o-mini"
        assert span.attributes["gen_ai.usage.input_tokens"] == USAGE[0]
        assert span.attributes["gen_ai.usage.output_tokens"] == USAGE[1]
        # gpt-4o-mini: $0.15 / $0.60 per million input / output tokens.
        assert span.attributes["gen_ai.usage.cost"] == pytest.approx(
            (USAGE[0] * 0.15 + USAGE[1] * 0.60) / 1e6
        )
        parent = attempts[span.attributes["little.step.path"]]
        assert span.parent is not None and span.parent.span_id == parent.context.span_id
        assert parent.start_time <= span.start_time <= span.end_time <= parent.end_time

    tools = [s for s in mine if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
    assert [s.attributes["gen_ai.tool.name"] for s in tools] == ["noop"]
    assert tools[0].parent is not None
    assert tools[0].parent.span_id == attempts["prep"].context.span_id
    # Attempts hang under the run's (virtual, remote) root: one parent for all of them.
    assert len({s.parent.span_id for s in attempts.values() if s.parent}) == 1


def test_a_failed_tool_call_and_its_attempt_are_error_spans(
    exporter: InMemorySpanExporter,
) -> None:
    with pytest.raises(RunFailedError) as failed:
        run_workflow(broken, {}, world=MemoryWorld())
    run_id = failed.value.result.run_id
    spans = [
        s
        for s in exporter.get_finished_spans()
        if s.context and s.context.trace_id == run_trace_id(run_id)
    ]
    tool = next(s for s in spans if s.attributes.get("gen_ai.tool.name") == "explode")
    assert not tool.status.is_ok and tool.attributes["error.type"]
    attempt = next(s for s in spans if s.name == "step boom")
    assert attempt.attributes["little.step.outcome"] == "failed"


def test_tracing_off_records_nothing() -> None:
    spans = InMemorySpanExporter()
    enable_tracing(spans)
    disable_tracing()
    with build_script().installed():
        run_workflow(fan, {"keys": ["x"]}, world=MemoryWorld())
    assert spans.get_finished_spans() == ()
