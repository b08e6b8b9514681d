"""One reader of the JSON in a model's reply, for steps, the planner and the supervisor."""

from __future__ import annotations

from typing import Any

import pytest

from little_dist.harness.replies import json_in_reply


@pytest.mark.parametrize(
    ("reply", "value"),
    [
        ('{"a": 1}', {"a": 1}),
        ("  [1, 2]\n", [1, 2]),
        ('```json\n{"a": 1}\n```', {"a": 1}),
        ('```\n{"a": 1}\n```', {"a": 1}),
        ('```json {"a": 1}```', {"a": 1}),  # one line, as planners sometimes answer
        ('```{"a": 1}```', {"a": 1}),
        ('Here it is: {"a": {"b": 2}}. Done.', {"a": {"b": 2}}),
        ("The list: [1, 2] as asked", [1, 2]),
        ("42", 42),
        ("not json", "not json"),
        ('Here: {"a": nope}', 'Here: {"a": nope}'),
    ],
)
def test_a_reply_gives_its_json_value_or_itself(reply: str, value: Any) -> None:
    assert json_in_reply(reply) == value


def test_the_three_readers_are_one() -> None:
    from little_dist.harness import output_modes
    from little_dist.outer_loop import supervisor
    from little_dist.planner import harnesses

    assert output_modes.json_in_reply is json_in_reply
    assert supervisor.json_in_reply is json_in_reply
    assert harnesses.json_in_reply is json_in_reply
