"""An append's inputs encoded once (``prepare_events``): the payload every reader sees is the
stored text read back, and text that is not one JSON document is refused."""

from __future__ import annotations

import json

import pytest

from little_dist.errors import InvalidInputError
from little_dist.events import EventInput
from little_dist.world.defaults import PreparedEvent, prepare_events


def test_the_payload_is_the_stored_text_read_back() -> None:
    source = {"b": (1, 2), "a": {"nested": [True, None, "x"]}}
    [prepared] = prepare_events([EventInput(type="T", payload=source)])
    assert prepared.payload_json == '{"a":{"nested":[true,null,"x"]},"b":[1,2]}'
    assert prepared.payload == {"a": {"nested": [True, None, "x"]}, "b": [1, 2]}
    assert prepared.payload is not source and prepared.payload["a"] is not source["a"]


def test_text_past_the_document_is_refused_as_json_loads_refuses_it() -> None:
    assert PreparedEvent("T", None, '{"a": 1}\n').payload == {"a": 1}
    for text in ('{"a": 1} {"b": 2}', '{"a": 1} junk', "{"):
        with pytest.raises(json.JSONDecodeError):
            _ = PreparedEvent("T", None, text).payload


def test_an_input_that_is_not_an_event_input_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="EventInput"):
        prepare_events([{"type": "T"}])  # type: ignore[list-item]
