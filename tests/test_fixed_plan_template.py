"""A fixed plan compiled once per definition (issue 24): what does not depend on the input
(the LWIR's validation, the request's body, the version's lock, its shared part) is printed
and checked once, a new input costs its own hashes, and every id and hash is the slow
path's."""

from __future__ import annotations

import json
from typing import Any

import pytest

from little_dist import define_workflow
from little_dist.canonical import CanonicalTemplate, canonical_json, sha256_digest
from little_dist.compiler import compile_lwir
from little_dist.fleet.versions import split_version
from little_dist.lwir import validate as lwir_validate
from little_dist.planner.fixed import fixed_plan_events
from little_dist.planner.request import orchestration_request
from little_dist.planner.session import draft_payload, requested_payload, valid_payload
from tests import fleet_app

INPUTS: list[tuple[Any, Any]] = [
    (fleet_app.chain5, {"n": 1}),
    (fleet_app.chain5, {"n": 2.5, "z": [1, "x"], "é": {"😀": None}}),
    (fleet_app.chain5, {"b": True, "a": '\u0000quoted "\\ text'}),
    (fleet_app.fan1000, {"keys": []}),
    (fleet_app.fan1000, {"keys": ["a", "b", "c"]}),
]


def test_a_canonical_template_fills_to_the_canonical_json_of_the_filled_value() -> None:
    hole = CanonicalTemplate.hole
    template = CanonicalTemplate({"z": {"b": hole("x"), "a": [1, hole("y")]}, "é😀": "\u0000"})
    for x, y in (({"q": 1, "p": [2.5]}, "text"), (None, {"😀": "é", "a": 1e21})):
        filled = {"x": canonical_json(x), "y": canonical_json(y)}
        value = {"z": {"b": x, "a": [1, y]}, "é😀": "\u0000"}
        assert template.text(filled) == canonical_json(value)
        assert template.digest(filled) == sha256_digest(value)


@pytest.mark.parametrize(("definition", "run_input"), INPUTS)
def test_a_fixed_plan_records_what_the_slow_path_records(definition: Any, run_input: Any) -> None:
    planned = fixed_plan_events(definition, run_input)
    assert planned is not None
    # The request's id and hash, recomputed by walking its body.
    request = orchestration_request(definition, run_input)
    body = dict(request.body)
    request_id, locks = body.pop("requestId"), dict(body.pop("locks"))
    request_hash = locks.pop("requestHash")
    assert body["input"] == json.loads(canonical_json(run_input))
    assert locks["inputHash"] == sha256_digest(run_input)
    assert request_id == "orq_" + sha256_digest({**body, "locks": locks})[7:23]
    assert request_hash == sha256_digest({**body, "locks": locks, "requestId": request_id})
    # The version: compile_lwir's, which walks the whole lock.
    lwir = json.loads(canonical_json(dict(definition.plan)))
    version = compile_lwir(lwir, request=request.compile_request)
    assert planned.version.to_json() == version.to_json()
    assert (planned.version.id, planned.version.hash) == (version.id, version.hash)
    # The planning events and the shared part.
    payloads = [event.payload for event in planned.events]
    assert payloads[0] == requested_payload(definition, request)
    assert payloads[2] == draft_payload(request, 1, lwir, valid=True)
    assert payloads[3] == valid_payload(request, 1, sha256_digest(lwir), version)
    assert split_version(planned.version, planned.shared_part) == split_version(version)


def test_a_batch_of_inputs_validates_the_lwir_once(monkeypatch: pytest.MonkeyPatch) -> None:
    definition = define_workflow(
        id="fleet.chain5",
        description="A fresh definition: nothing of it is cached yet.",
        input={"type": "object"},
        output={"type": "object"},
        model=fleet_app._SLOT,
        tools=[fleet_app.noop],
        plan=fleet_app._chain_plan(5, "fleet.chain5"),
    )
    validated: list[Any] = []
    walk = lwir_validate._validate_document
    monkeypatch.setattr(
        lwir_validate, "_validate_document", lambda *a, **k: validated.append(1) or walk(*a, **k)
    )
    first = fixed_plan_events(definition, {"n": 0})
    once = len(validated)
    versions = {first.version.id if first else None}
    for n in range(1, 200):
        planned = fixed_plan_events(definition, {"n": n})
        assert planned is not None
        versions.add(planned.version.id)
    assert 0 < once <= 2 and len(validated) == once
    assert len(versions) == 200  # each input its own version id, as upstream's


@pytest.mark.parametrize(("definition", "run_input"), INPUTS)
def test_a_fixed_plan_start_prints_the_bytes_the_slow_path_prepares(
    definition: Any, run_input: Any
) -> None:
    from little_dist.fleet.one_trip_starts import bound_start as _bound_start
    from little_dist.fleet.run_starts import start_events as _start_events
    from little_dist.fleet.submission_requests import Planned, SubmitRequest
    from little_dist.planner.fixed import fixed_plan_start
    from little_dist.world.defaults import prepare_events

    # A first input prints the templates; the ones after fill them.
    assert fixed_plan_start(definition, {"keys": ["first"]}) is not None
    slow = fixed_plan_events(definition, run_input)
    fast = fixed_plan_start(definition, run_input)
    assert slow is not None and fast is not None
    assert fast.version.to_json() == slow.version.to_json()
    assert fast.shared_part == slow.shared_part
    expected = prepare_events(slow.events)
    assert [(e.type, e.occurrence_id, e.payload_json) for e in fast.events] == [
        (e.type, e.occurrence_id, e.payload_json) for e in expected
    ]
    assert [e.payload for e in fast.events] == [e.payload for e in expected]

    # The run's start (the version's binding, the input) as well.
    class Parts:
        def put_version_part(self, body: str) -> str:
            return "sha256:" + body[:0]

    request = SubmitRequest("run_x", json.loads(canonical_json(run_input)), definition=definition)
    printed = _bound_start(
        Parts(),  # type: ignore[arg-type]
        Planned(fast.version, fast.events, fast.shared_part),
        request,
    )
    _, binding = split_version(slow.version, slow.shared_part)
    expected += prepare_events(_start_events(slow.version, request.run_input, binding))
    assert [(e.type, e.occurrence_id, e.payload_json) for e in printed] == [
        (e.type, e.occurrence_id, e.payload_json) for e in expected
    ]
