"""An append's inputs encoded once (``prepare_events``): the payload every reader sees is the
stored text read back (the input's own payload when that reads back equal, with the same
types), and text that is not one JSON document is refused."""

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
    # (a tuple reads back as a list: the text is parsed)
    assert prepared.payload is not source and prepared.payload["a"] is not source["a"]


def test_a_payload_the_text_reads_back_as_is_the_input_s_own_not_parsed_again() -> None:
    source = {"b": [1, 2], "a": {"nested": [True, None, "x"]}, "f": 0.5}
    event = EventInput(type="T", payload=source)
    [prepared] = prepare_events([event])
    assert prepared.payload is event.payload
    assert prepared.payload == json.loads(prepared.payload_json)
    # (types all through: an int stays an int, a float a float)
    assert type(prepared.payload["b"][0]) is int and type(prepared.payload["f"]) is float
    # An input whose text would read back otherwise (a float printed as an integer) is
    # parsed: readers see what the stored text says.
    [floats] = prepare_events([EventInput(type="T", payload={"f": 2.0})])
    assert floats.payload == {"f": 2} and type(floats.payload["f"]) is int


def test_text_past_the_document_is_refused_as_json_loads_refuses_it() -> None:
    assert PreparedEvent("T", None, '{"a": 1}\n').payload == {"a": 1}
    for text in ('{"a": 1} {"b": 2}', '{"a": 1} junk', "{"):
        with pytest.raises(json.JSONDecodeError):
            _ = PreparedEvent("T", None, text).payload


def test_an_input_that_is_not_an_event_input_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="EventInput"):
        prepare_events([{"type": "T"}])  # type: ignore[list-item]
